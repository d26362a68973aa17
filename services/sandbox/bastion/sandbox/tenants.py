"""A cap on how much one tenant runs at once in one service instance (its search workers),
with a bounded wait for a turn: each tenant has its own, so one tenant at its cap holds
back none other. `TenantBusy` is also what a tenant's sandboxes over their cap across
every instance are refused with (`sharedslots`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field

import anyio

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError

__all__ = ["TenantBusy", "TenantSlots"]


class TenantBusy(BastionError):
    """A tenant's sandboxes (or searches) stayed at the cap for longer than a call may wait,
    or its queue was full."""

    code = codes.UNAVAILABLE


@dataclass(eq=False)
class TenantSlots:
    """One `CapacityLimiter` per tenant: a call over the cap waits up to `wait_s`, no longer.

    A tenant's limiter is dropped once nobody holds or waits for it, so the map holds only
    tenants with work in flight. The cap holds per service instance: with several
    instances in the queue group, a tenant may run up to the cap on each. With
    `max_waiting`, a call finding that many of its tenant's already waiting is refused at
    once: a tenant's queue is its own and bounded, so its flood cannot take every request
    the service works on at a time (`Service`'s `max_in_flight`) from the others.
    """

    per_tenant: int
    wait_s: float
    _: KW_ONLY
    what: str
    """What is counted, in the refusal: `searches running`."""
    setting: str
    """The setting that raises the cap, named in the refusal."""
    max_waiting: int | None = None
    waiting_setting: str = ""
    """The setting that raises `max_waiting`, named in the refusal."""
    _limiters: dict[str, anyio.CapacityLimiter] = field(default_factory=dict, init=False)
    _users: dict[str, int] = field(default_factory=dict, init=False)

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of `tenant`'s turns; `TenantBusy` if none frees up in time."""
        limiter = self._limiters.setdefault(tenant, anyio.CapacityLimiter(self.per_tenant))
        waiting = self._users.get(tenant, 0) - limiter.borrowed_tokens
        full = limiter.borrowed_tokens >= self.per_tenant
        if self.max_waiting is not None and full and waiting >= self.max_waiting:
            raise TenantBusy(
                f"tenant {tenant} has {limiter.borrowed_tokens} {self.what}, its cap, and "
                f"{waiting} more waiting, its queue's length: retry later, or raise the cap "
                f"({self.setting}) or the queue ({self.waiting_setting})"
            )
        self._users[tenant] = self._users.get(tenant, 0) + 1
        try:
            acquired = False
            with anyio.move_on_after(self.wait_s):
                await limiter.acquire()
                acquired = True
            if not acquired:
                raise TenantBusy(
                    f"tenant {tenant} has {limiter.borrowed_tokens} {self.what}, its cap, "
                    f"and none ended within {self.wait_s:g} s: retry later, or raise the cap "
                    f"({self.setting})"
                )
            try:
                yield
            finally:
                limiter.release()
        finally:
            self._users[tenant] -= 1
            if not self._users[tenant]:
                del self._users[tenant]
                del self._limiters[tenant]
