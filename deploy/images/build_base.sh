#!/usr/bin/env bash
# Build Bastion's base image with no registry: a minimal Debian root filesystem from the
# Debian mirror (debootstrap) with Python 3 and CA certificates, imported into the local
# engine. The service images start FROM it (`--build-arg BASE=...`); on a machine with a
# registry any Debian-based Python 3.11+ image with `python3 -m venv` will do instead.
#
# Skips the build when an image with this recipe's tag is already on the engine; pass
# --rebuild to build anew. Needs root (debootstrap) and a running engine. Prints the tag.
set -euo pipefail

RECIPE=1 # raise when what goes into the image changes, so that caches build it anew
IMAGE="${BASTION_BASE_IMAGE:-bastion-base:bookworm-r$RECIPE}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3-venv brings ensurepip, so an image build can make a venv without a Debian pip.
# The sandbox's bubblewrap is not here: only the sandbox image installs it (its Dockerfile).
PACKAGES=python3,python3-venv,ca-certificates

if [[ "${1:-}" != "--rebuild" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE"
    exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    echo "installing debootstrap" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "building $IMAGE from $SUITE at $MIRROR" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >&2
# Images never need package caches, documentation or locales; the apt lists stay out too
# (a Dockerfile that installs a package runs `apt-get update` first).
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar -C "$root" --numeric-owner -c . |
    docker import \
        --change "LABEL io.bastion.base-image=$RECIPE" \
        --change 'ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1' \
        --change 'CMD ["/bin/sh"]' \
        - "$IMAGE" >/dev/null
echo "$IMAGE"
