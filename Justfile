# Bastion's recipes. `just` alone lists them.

default:
    @just --list

# Bring Bastion up on this machine: embedded NATS and the six services
up *ARGS:
    bastion up {{ARGS}}

# Run the whole test suite
test *ARGS:
    pytest {{ARGS}}

# Lint, format check, and strict typing
lint:
    ruff check .
    ruff format --check .
    mypy proto/bastion/proto shared/bastion/shared cli services

# Build the Docker sandbox test image locally (no registry) and print its image ID
docker-image *ARGS:
    tests/docker/build_image.sh {{ARGS}}

# Build the base image the service images start from (Debian + Python, no registry); print its tag
base-image *ARGS:
    deploy/images/build_base.sh {{ARGS}}

# Build the images: the six services, NATS and the trace receiver (unchanged ones are kept)
images *ARGS:
    python deploy/images/build.py --base "$(deploy/images/build_base.sh)" {{ARGS}}

# Write what compose reads into deploy/generated/: NATS users (`bastion nats config`), keys, token
compose-config *ARGS:
    deploy/compose/config.sh {{ARGS}}

# Build the images and bring Bastion up with Docker Compose, waiting until every service is healthy
compose-up: images compose-config
    docker compose up -d --wait

# Stop the compose deployment (`--volumes` also drops JetStream's data)
compose-down *ARGS:
    docker compose down {{ARGS}}

# Write the Secrets' files of a Kubernetes overlay (dev or prod) into k8s/overlays/OVERLAY/generated/
k8s-config OVERLAY *ARGS:
    k8s/config.sh {{OVERLAY}} {{ARGS}}

# Render a Kubernetes overlay (dev or prod): `just k8s-render prod | kubectl apply -f -`
k8s-render OVERLAY:
    kubectl kustomize k8s/overlays/{{OVERLAY}}

# Benchmarks: medians and ratios against baselines measured in the same run
bench:
    python -m bench.bench_calls
    python -m bench.bench_shell
    python -m bench.bench_sessions
    python -m bench.bench_policy
    python -m bench.bench_egress
    python -m bench.bench_traces
    python -m bench.bench_load

# Write the JSON Schema of every wire message to schema/
schema:
    bastion proto schema --out schema
