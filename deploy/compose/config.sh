#!/usr/bin/env bash
# Make what compose.yaml reads, in $BASTION_GENERATED (deploy/generated/; 0700, never
# committed). Each file is made once and kept; `--rotate` makes new NATS nkeys (then
# `docker compose up -d --force-recreate`, so that NATS and every service take them).
#   nats/           `bastion nats config`: the server config, its users' public keys, and per
#                   service a seed (.nk, mounted into it) and a .env naming it
#   vault.env       the vault's master key (made once: a new key would lose every secret)
#   http-tokens     the front door's token (made once), `label:token`
#   workspaces/     where workspaces live, the sandbox's (uid 10000); named in the top-level
#                   .env as BASTION_WORKSPACES, which compose reads
# The files the containers read themselves (the NATS config, the services' seeds, the tokens)
# are given to the containers' uid 10000 and stay 0600; the .env files and the operator's
# seed stay the invoking user's, for compose and the CLI.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${BASTION_GENERATED:-deploy/generated}
UID_IN_IMAGES=10000
mkdir -p "$OUT" && chmod 0700 "$OUT"

in_out_as_root() {
    # Files owned by the images' uid can only be replaced or handed over as root: directly
    # when we are root, else through the engine (whoever may run containers may do this).
    # Paths are relative to $OUT.
    if [[ $(id -u) == 0 ]]; then
        (cd "$OUT" && "$@")
    else
        docker run --rm --user 0 --network none -v "$(realpath "$OUT"):/out" -w /out \
            "${BASTION_BASE_IMAGE:-$(deploy/images/build_base.sh)}" "$@"
    fi
}

if [[ "${1:-}" == "--rotate" && -d $OUT/nats ]]; then
    in_out_as_root rm -rf nats
fi
if [[ ! -d $OUT/nats ]]; then
    bastion nats config --out "$OUT/nats" --url nats://nats:4222 \
        --seed-dir /etc/bastion/nats >/dev/null
fi

umask 077
if [[ ! -s $OUT/vault.env ]]; then
    echo "BASTION_VAULT_MASTER_KEY=$(head -c 32 /dev/urandom | base64)" >"$OUT/vault.env"
fi
if [[ ! -s $OUT/http-tokens ]]; then
    echo "compose:$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')" >"$OUT/http-tokens.new"
    mv "$OUT/http-tokens.new" "$OUT/http-tokens"
fi
umask 022
mkdir -p "$OUT/workspaces"
# The default setup names its workspaces in the .env compose reads; a caller that chose its
# own $BASTION_GENERATED passes BASTION_WORKSPACES itself.
if [[ -z ${BASTION_GENERATED:-} && ! -s .env ]]; then
    echo "BASTION_WORKSPACES=$(realpath "$OUT/workspaces")" >.env
fi
in_out_as_root chown "$UID_IN_IMAGES:$UID_IN_IMAGES" \
    nats/nats-server.conf nats/auth.conf http-tokens workspaces \
    nats/{orchestrator,policy,sandbox,egress,mcp,vault}.nk
echo "$OUT"
