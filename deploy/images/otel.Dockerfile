# The trace receiver and viewer of compose (deploy/otel/receiver.py): no collector image
# can be pulled without a registry, so a small OTLP/HTTP receiver of ours stands in.
ARG BASE
FROM ${BASE} AS install
COPY wheels /wheels
RUN python3 -m venv /opt/otel \
 && /opt/otel/bin/pip install --no-cache-dir --no-index --find-links /wheels opentelemetry-proto \
 && /opt/otel/bin/pip uninstall -y pip

FROM ${BASE}
COPY --from=install /opt/otel /opt/otel
COPY receiver.py /opt/otel/receiver.py
ARG SOURCE_DIGEST
LABEL io.bastion.source="${SOURCE_DIGEST}"
USER 10000:10000
EXPOSE 4318
CMD ["/opt/otel/bin/python", "/opt/otel/receiver.py", "4318"]
