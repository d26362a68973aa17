# One Bastion service: proto + shared + that service, installed from wheels built on the
# host (build.py), on a base image given as a build argument. Non-root, and nothing in it
# is written at run time: the root filesystem can be mounted read-only.
ARG BASE
FROM ${BASE} AS install
COPY wheels /wheels
ARG SERVICE
# --no-index: every wheel was fetched by build.py, so the build needs no package index.
RUN python3 -m venv /opt/bastion \
 && /opt/bastion/bin/pip install --no-cache-dir --no-index --find-links /wheels "bastion-${SERVICE}" \
 && /opt/bastion/bin/pip uninstall -y pip

FROM ${BASE}
ARG APT_PACKAGES=""
RUN if [ -n "${APT_PACKAGES}" ]; then \
        apt-get update -qq \
     && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${APT_PACKAGES} \
     && rm -rf /var/lib/apt/lists/* /var/cache/apt/*; \
    fi
COPY --from=install /opt/bastion /opt/bastion
# Where a volume shared by egress and sandbox carries the proxy's socket: made here so that a
# new volume takes this owner.
RUN mkdir -m 0700 /run/bastion-egress && chown 10000:10000 /run/bastion-egress
ARG SERVICE
ARG SOURCE_DIGEST
LABEL io.bastion.service="${SERVICE}" io.bastion.source="${SOURCE_DIGEST}"
ENV PATH=/opt/bastion/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    BASTION_SERVICE=${SERVICE} \
    BASTION_STATE_DIR=/var/lib/bastion \
    BASTION_PROBE_FILE=/tmp/bastion-alive
# 10000: not the sandbox's command uid (10001), not a system uid.
USER 10000:10000
WORKDIR /var/lib/bastion
CMD ["sh", "-c", "exec python -m bastion.${BASTION_SERVICE}"]
