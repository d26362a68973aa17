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

# Benchmarks: medians and ratios against baselines measured in the same run
bench:
    python -m bench.bench_calls
    python -m bench.bench_sessions
    python -m bench.bench_policy
    python -m bench.bench_egress
    python -m bench.bench_load

# Write the JSON Schema of every wire message to schema/
schema:
    bastion proto schema --out schema
