#!/usr/bin/env bash
# Make the Secrets' files an overlay reads, in k8s/overlays/<overlay>/generated/ (0700, never
# committed): the NATS server config with its users' public keys, each service's seed and
# bus variables (`bastion nats config`, services connecting to nats.bastion.svc, finding
# their seeds at /etc/bastion/nats), the vault's master key and the front door's token.
# Each is made once and kept (a new master key would lose every secret); `--rotate` makes
# new NATS nkeys.
#
#     k8s/config.sh dev|prod [--rotate]
set -euo pipefail
cd "$(dirname "$0")"

overlay=${1:?which overlay: dev or prod}
out=overlays/$overlay/generated
[[ -f overlays/$overlay/kustomization.yaml ]] || { echo "no overlay $overlay" >&2; exit 2; }
mkdir -p "$out" && chmod 0700 "$out"
umask 077

if [[ "${2:-}" == "--rotate" ]]; then
    rm -rf "$out/nats"
fi
if [[ ! -d $out/nats ]]; then
    bastion nats config --out "$out/nats" --url nats://nats.bastion.svc:4222 \
        --store-dir /data/jetstream --seed-dir /etc/bastion/nats >/dev/null
fi
[[ -s $out/vault-master-key ]] || head -c 32 /dev/urandom | base64 >"$out/vault-master-key"
[[ -s $out/http-tokens ]] ||
    echo "operator:$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')" >"$out/http-tokens"
echo "$out"
