#!/usr/bin/env bash
# Build the image the Docker sandbox tests run in, with no registry: a minimal Debian root
# filesystem from the Debian mirror (debootstrap), imported into the local engine. Prints
# the image ID, which pins it (`docker:bastion-sandbox-test@<ID>`).
#
# Skips the build when an image with this recipe's tag is already on the engine; pass
# --rebuild to build anew. Needs root (debootstrap) and a running engine.
set -euo pipefail

RECIPE=2 # raise when what goes into the image changes, so that caches build it anew
IMAGE="${BASTION_TEST_IMAGE:-bastion-sandbox-test:bookworm-r$RECIPE}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [[ "${1:-}" != "--rebuild" ]] && id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null); then
    echo "$id"
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
debootstrap --variant=minbase --include=python3 "$SUITE" "$root" "$MIRROR" >&2
# What a sandbox never needs: package caches and lists, documentation.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar -C "$root" --numeric-owner -c . |
    docker import \
        --change "LABEL io.bastion.test-image=$RECIPE" \
        --change 'CMD ["/bin/sh"]' \
        - "$IMAGE" >/dev/null
docker image inspect -f '{{.Id}}' "$IMAGE"
