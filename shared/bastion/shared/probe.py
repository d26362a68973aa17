"""A container's liveness and readiness: a file the service touches while it serves.

A service given `BASTION_PROBE_FILE` touches that file every few seconds from its event
loop while it is connected to NATS, and removes it when it stops or loses the connection.
`python -m bastion.shared.probe` (a Docker health check, a Kubernetes exec probe) answers
0 while the file is fresh: so a stuck event loop, a lost bus or a stopped service all fail
the probe, and the probe needs no NATS permission of its own. Without the variable nothing
is written (`bastion up` supervises its children itself).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from nats.aio.client import Client

__all__ = ["BEAT_S", "STALE_AFTER_S", "check", "heartbeat"]

BEAT_S = 5.0
STALE_AFTER_S = 30.0
"""Six missed beats: a busy loop may be slow, but not for that long."""


async def _beat(path: anyio.Path, client: Client) -> None:
    while True:
        if client.is_connected:
            await path.touch()
        else:
            await path.unlink(missing_ok=True)
        await anyio.sleep(BEAT_S)


@asynccontextmanager
async def heartbeat(path: str, client: Client) -> AsyncIterator[None]:
    """Touch `path` while the block runs and `client` is connected (nothing if `path` is
    empty); remove it on the way out."""
    if not path:
        yield
        return
    beating = anyio.Path(path)
    async with anyio.create_task_group() as group:
        group.start_soon(_beat, beating, client)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await beating.unlink(missing_ok=True)


def check(env: Mapping[str, str], now: float | None = None) -> str | None:
    """Why the service is not healthy, or None when it is."""
    path = env.get("BASTION_PROBE_FILE", "")
    if not path:
        return "BASTION_PROBE_FILE is not set, so there is nothing to check"
    try:
        age = (time.time() if now is None else now) - Path(path).stat().st_mtime
    except FileNotFoundError:
        return f"{path} is missing: the service is not serving (starting, stopped or off the bus)"
    if age > STALE_AFTER_S:
        return f"{path} is {age:.0f} s old: the service stopped beating"
    return None


def main() -> int:
    problem = check(os.environ)
    if problem is None:
        return 0
    sys.stderr.write(f"unhealthy: {problem}\n")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
