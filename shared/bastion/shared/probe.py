"""A container's liveness and readiness, from a file the service beats while it runs.

A service given `BASTION_PROBE_FILE` rewrites that file every few seconds from its event
loop, `ready` while it is connected to NATS and `not-ready` while it is not, and removes it
when it stops. `python -m bastion.shared.probe live` (a Kubernetes liveness probe) answers
0 while the file is fresh: the process and its event loop are alive, whatever the bus does,
so a NATS outage does not restart every pod. `python -m bastion.shared.probe ready` (the
default: readiness and startup probes, a Docker health check) answers 0 only while it is
fresh and says `ready`. So a stuck event loop or a stopped service fails both, a lost bus
fails readiness only, and the probe needs no NATS permission of its own (nor imports
`nats`: a probe runs every few seconds). Without the variable nothing is written
(`bastion up` supervises its children itself).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from nats.aio.client import Client

__all__ = ["BEAT_S", "NOT_READY", "READY", "STALE_AFTER_S", "check", "heartbeat", "main"]

BEAT_S = 5.0
STALE_AFTER_S = 30.0
"""Six missed beats: a busy loop may be slow, but not for that long."""
READY = "ready"
NOT_READY = "not-ready"
_CHECKS = ("live", "ready")


async def _write(path: anyio.Path, state: str) -> None:
    """`state` into `path` whole: written beside it, then renamed over it."""
    beside = path.with_name(f".{path.name}.new")
    await beside.write_text(f"{state}\n")
    await beside.rename(path)


async def _beat(path: anyio.Path, client: Client) -> None:
    while True:
        await _write(path, READY if client.is_connected else NOT_READY)
        await anyio.sleep(BEAT_S)


@asynccontextmanager
async def heartbeat(path: str, client: Client) -> AsyncIterator[None]:
    """Beat `path` while the block runs, saying whether `client` is connected (nothing if
    `path` is empty); remove it on the way out."""
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


def check(env: Mapping[str, str], now: float | None = None, *, ready: bool = True) -> str | None:
    """Why the service is not alive (`ready=False`) or not ready, or None when it is."""
    path = env.get("BASTION_PROBE_FILE", "")
    if not path:
        return "BASTION_PROBE_FILE is not set, so there is nothing to check"
    try:
        age = (time.time() if now is None else now) - Path(path).stat().st_mtime
        state = Path(path).read_text().strip()
    except FileNotFoundError:
        return f"{path} is missing: the service is not running (starting or stopped)"
    if age > STALE_AFTER_S:
        return f"{path} is {age:.0f} s old: the service stopped beating"
    if ready and state != READY:
        return f"{path} says {state!r}: the service is not connected to NATS"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bastion.shared.probe [live|ready]`: 0 when healthy, else 1 (2 for a bad
    argument), the reason on stderr."""
    given = list(sys.argv[1:] if argv is None else argv) or ["ready"]
    if len(given) != 1 or given[0] not in _CHECKS:
        sys.stderr.write("usage: python -m bastion.shared.probe [live|ready]\n")
        return 2
    problem = check(os.environ, ready=given[0] == "ready")
    if problem is None:
        return 0
    sys.stderr.write(f"unhealthy: {problem}\n")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
