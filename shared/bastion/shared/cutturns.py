"""Cutting secrets out of large texts off the event loop, each tenant's cuts in turn.

A cut costs time in proportion to its text (`bastion.shared.redaction`). Made on the event
loop, one tenant's flood of output would hold up every other tenant's calls: so a text of
`INLINE_CHARS` characters or more is cut in a worker thread (the automaton lets go of the
GIL while it searches), under its tenant's own limiter, one cut of a tenant at a time. A
tenant's cuts wait behind its own, never behind another tenant's. A shorter text is cut
where it is: handing it to a thread would cost more than the cut (some 60 µs).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import anyio
import anyio.to_thread

from bastion.shared.redaction import Redactor

__all__ = ["INLINE_CHARS", "MAX_TENANTS", "CutTurns", "Cutter"]

INLINE_CHARS: Final = 16 * 1024
"""A cut of fewer characters is made on the event loop (at most some 60 µs)."""
MAX_TENANTS: Final = 4096
"""The tenants whose limiters are kept; the least recently used idle one goes first."""

T = TypeVar("T")


class CutTurns:
    """The worker threads' turns: one limiter of one token per tenant."""

    def __init__(self) -> None:
        self._limiters: OrderedDict[str, anyio.CapacityLimiter] = OrderedDict()

    async def run(self, tenant: str, size: int, work: Callable[[], T]) -> T:
        """What `work` (a cut of `size` characters) returns, done on the event loop when it
        is small, else in a worker thread in `tenant`'s turn. A cancel while it waits for
        its turn takes it out of the queue; one while the thread works is taken when the
        work is done (the work is never left half done)."""
        if size < INLINE_CHARS:
            return work()
        return await self.in_thread(tenant, work)

    async def in_thread(self, tenant: str, work: Callable[[], T]) -> T:
        """What `work` returns, done in a worker thread in `tenant`'s turn whatever its size
        (work that also reads a file, which the event loop must not wait on)."""
        return await anyio.to_thread.run_sync(work, limiter=self._limiter(tenant))

    def _limiter(self, tenant: str) -> anyio.CapacityLimiter:
        limiter = self._limiters.get(tenant)
        if limiter is None:
            limiter = self._limiters[tenant] = anyio.CapacityLimiter(1)
        self._limiters.move_to_end(tenant)
        if len(self._limiters) > MAX_TENANTS:
            kept = self._limiters.items()
            idle = next((t for t, held in kept if t != tenant and not held.borrowed_tokens), "")
            self._limiters.pop(idle, None)  # none idle: over the bound until one is
        return limiter


@dataclass(frozen=True)
class Cutter:
    """The cuts of one session's replies: its redactor (None: nothing to cut), its tenant,
    and the turns its large cuts wait for."""

    redactor: Redactor | None
    tenant: str
    turns: CutTurns

    async def cut(self, text: str) -> str:
        """`text` with every value of the redactor's cut out."""
        redactor = self.redactor
        if redactor is None or not text:
            return text
        return await self.turns.run(self.tenant, len(text), lambda: redactor.redact(text))

    async def run(self, size: int, work: Callable[[], T]) -> T:
        """What `work` returns: a cut of `size` characters made with `redactor` by a caller
        that keeps state of its own (a stream's held text), in the tenant's turn when it is
        large; on the event loop when there is nothing to cut."""
        if self.redactor is None:
            return work()
        return await self.turns.run(self.tenant, size, work)

    async def in_thread(self, work: Callable[[], T]) -> T:
        """What `work` returns (a read of a file, cut with `redactor`), done in a worker
        thread in the tenant's turn."""
        return await self.turns.in_thread(self.tenant, work)
