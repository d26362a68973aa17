"""Upstream connections kept per session: one task owns each, the session's calls share it.

A connection to an upstream server is opened at a session's start (to check its tools
against their pins) and kept for the session's calls: starting a server per call would
cost more than the call. Each lives in a task of its own, because the SDK's session runs
its reader in a task group that must be left by the task that entered it. A connection is
closed when its session closes, when it has been idle for `idle_s`, or when the server
stopped answering (the next use opens a new one).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup, TaskStatus

from bastion.mcp.gateway.upstream import Upstream

__all__ = ["ConnectionKey", "UpstreamPool", "running_pool"]

logger = logging.getLogger(__name__)

ConnectionKey = tuple[str, str, str]
"""(tenant, server, session id)."""

Opener = Callable[[], AbstractAsyncContextManager[Upstream]]


@dataclass
class _Held:
    upstream: Upstream
    closing: anyio.Event = field(default_factory=anyio.Event)
    used_at: float = field(default_factory=time.monotonic)

    @property
    def usable(self) -> bool:
        """Alive and not told to close (a connection closing is never given to a call)."""
        return self.upstream.alive and not self.closing.is_set()


class UpstreamPool:
    """The open connections, by (tenant, server, session)."""

    def __init__(self, task_group: TaskGroup, idle_s: float) -> None:
        self._tg = task_group
        self._idle_s = idle_s
        self._held: dict[ConnectionKey, _Held] = {}
        self._opening: dict[ConnectionKey, anyio.Lock] = {}

    async def get(self, key: ConnectionKey, opener: Opener) -> Upstream:
        """The key's live connection, opened with `opener` if there is none.

        Raises:
            whatever `opener` raises while connecting (the server cannot be reached).
        """
        held = self._held.get(key)
        if held is not None and held.usable:  # the common case: no lock to take
            held.used_at = time.monotonic()
            return held.upstream
        lock = self._opening.setdefault(key, anyio.Lock())
        async with lock:
            held = self._held.get(key)
            if held is not None and held.usable:
                held.used_at = time.monotonic()
                return held.upstream
            if held is not None:
                held.closing.set()
            upstream: Upstream = await self._tg.start(self._own, key, opener)
            return upstream

    def live(self, key: ConnectionKey) -> Upstream | None:
        """The key's connection if one is open, alive and not closing; none is opened."""
        held = self._held.get(key)
        return held.upstream if held is not None and held.usable else None

    async def _own(
        self, key: ConnectionKey, opener: Opener, *, task_status: TaskStatus[Upstream]
    ) -> None:
        """Hold one connection open until it is told to close; a failure while connecting
        reaches the caller of `get`, one while closing is only logged."""
        held: _Held | None = None
        try:
            async with opener() as upstream:
                held = _Held(upstream)
                self._held[key] = held
                task_status.started(upstream)
                await held.closing.wait()
        except Exception:
            if held is None:
                raise
            logger.info("an upstream connection ended badly", extra={"server": key[1]})
        finally:
            if held is not None and self._held.get(key) is held:
                del self._held[key]

    def close_session(self, session_id: str) -> None:
        """Close every connection of a closed session."""
        for key, held in list(self._held.items()):
            if key[2] == session_id:
                held.closing.set()
                self._opening.pop(key, None)

    def close_server(self, tenant: str, server: str) -> None:
        """Close every connection to a server (it was removed or reviewed again)."""
        for key, held in list(self._held.items()):
            if key[:2] == (tenant, server):
                held.closing.set()

    async def sweep_idle(self) -> None:
        """Close idle connections, forever (run it in the service's task group)."""
        period = max(1.0, min(60.0, self._idle_s / 4)) if math.isfinite(self._idle_s) else 60.0
        while True:
            await anyio.sleep(period)
            now = time.monotonic()
            for key, held in list(self._held.items()):
                if now - held.used_at > self._idle_s:
                    held.closing.set()
                    self._opening.pop(key, None)


@asynccontextmanager
async def running_pool(idle_s: float) -> AsyncIterator[UpstreamPool]:
    """A pool whose connections all close when the block ends."""
    async with anyio.create_task_group() as tg:
        pool = UpstreamPool(tg, idle_s)
        tg.start_soon(pool.sweep_idle)
        try:
            yield pool
        finally:
            tg.cancel_scope.cancel()
