"""A cap on how much one tenant runs at once (sandboxes, search workers), with a bounded
wait for a turn: each tenant has its own, so one tenant at its cap holds back none other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError

__all__ = ["TenantBusy", "TenantSlots"]


class TenantBusy(BastionError):
    """A tenant's sandboxes (or searches) stayed at the cap for longer than a call may wait."""

    code = codes.UNAVAILABLE


class TenantSlots:
    """One `CapacityLimiter` per tenant: a call over the cap waits up to `wait_s`, no longer.

    A tenant's limiter is dropped once nobody holds or waits for it, so the map holds only
    tenants with work in flight. The cap holds per service instance: with several
    instances in the queue group, a tenant may run up to the cap on each. With
    `max_waiting`, a call finding that many of its tenant's already waiting is refused at
    once: a tenant's queue is its own and bounded, so its flood cannot take every request
    the service works on at a time (`Service`'s `max_in_flight`) from the others.
    """

    def __init__(
        self,
        per_tenant: int,
        wait_s: float,
        *,
        what: str = "sandboxes running",
        setting: str = "BASTION_MAX_SANDBOXES_PER_TENANT",
        max_waiting: int | None = None,
        waiting_setting: str = "",
    ) -> None:
        self._per_tenant = per_tenant
        self._max_waiting = max_waiting
        self._waiting_setting = waiting_setting
        self._wait_s = wait_s
        self._what = what
        self._setting = setting
        self._limiters: dict[str, anyio.CapacityLimiter] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of `tenant`'s turns; `TenantBusy` if none frees up in time."""
        limiter = self._limiters.setdefault(tenant, anyio.CapacityLimiter(self._per_tenant))
        waiting = self._users.get(tenant, 0) - limiter.borrowed_tokens
        full = limiter.borrowed_tokens >= self._per_tenant
        if self._max_waiting is not None and full and waiting >= self._max_waiting:
            raise TenantBusy(
                f"tenant {tenant} has {limiter.borrowed_tokens} {self._what}, its cap, and "
                f"{waiting} more waiting, its queue's length: retry later, or raise the cap "
                f"({self._setting}) or the queue ({self._waiting_setting})"
            )
        self._users[tenant] = self._users.get(tenant, 0) + 1
        try:
            acquired = False
            with anyio.move_on_after(self._wait_s):
                await limiter.acquire()
                acquired = True
            if not acquired:
                raise TenantBusy(
                    f"tenant {tenant} has {limiter.borrowed_tokens} {self._what}, its cap, "
                    f"and none ended within {self._wait_s:g} s: retry later, or raise the cap "
                    f"({self._setting})"
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
