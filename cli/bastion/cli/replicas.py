"""What each of N instances of a service gets under `bastion up --replicas N`.

Every endpoint is in a NATS queue group, so instances of one service share its requests;
what cannot be shared is settled here, per instance `k` (0 … N-1):

- **mcp**: the front door's HTTP port is the given one plus `k` (8787, 8788, …): one
  process binds a port, and a fixed, predictable port per instance is what a local
  client or a load balancer in front can be pointed at.
- **egress**: its proxy listens on its own Unix socket (`egress.sock`, `egress-1.sock`, …)
  and sandbox instance `k` bridges sandboxes to egress instance `k`'s (grants are in KV,
  so any egress instance honours any grant).
- **sandbox**: the Docker owner label is the given one plus `-k`, since a sandbox service
  removes every container of its owner when it starts.

Quotas are not divided: calls per second and concurrent sandboxes per tenant are counted
in KV across every instance (docs/scaling.md).
"""

from __future__ import annotations

import socket
from pathlib import Path

__all__ = ["instance_env", "instance_name"]


def instance_name(service: str, k: int, replicas: int) -> str:
    """`orchestrator` alone, `orchestrator.1` … `orchestrator.N` among replicas."""
    return service if replicas == 1 else f"{service}.{k + 1}"


def egress_socket_path(run_dir: Path, k: int) -> Path:
    return run_dir / ("egress.sock" if k == 0 else f"egress-{k}.sock")


def instance_env(
    service: str, k: int, replicas: int, env: dict[str, str], *, http_host: str, http_port: int,
    run_dir: Path,
) -> dict[str, str]:  # fmt: skip
    """The variables instance `k` of `service` gets on top of the service's own."""
    if service == "mcp":
        return {"BASTION_HTTP_LISTEN": f"{http_host}:{http_port + k}"}
    if service == "egress":
        return {"BASTION_EGRESS_LISTEN": f"unix:{egress_socket_path(run_dir, k)}"}
    if service == "sandbox":
        added = {"BASTION_EGRESS_SOCKET": str(egress_socket_path(run_dir, k))}
        if replicas > 1:
            owner = env.get("BASTION_DOCKER_OWNER") or socket.gethostname()
            added["BASTION_DOCKER_OWNER"] = f"{owner}-{k}"
        return added
    return {}
