"""Calls per second per tenant, across every orchestrator replica: one token bucket each in
KV, so one greedy agent cannot starve others however many replicas serve it.

A tenant's bucket (`bastion_quota`, key: the tenant's name in hex) holds up to one second of
calls (`BASTION_TENANT_CALLS_PER_S`) and refills continuously by the clock of whoever
changes it (seconds since the epoch; a clock behind the record's refills nothing). An
instance does not spend the shared bucket one call at a time: it leases a batch of
`max(1, rate x BASTION_TENANT_CALLS_LEASE_S)` tokens by one compare-and-set and spends them
locally until they run out or the lease ends (unspent ones are lost, never given back). So
the hot path is local most of the time, every token spent was taken from the one bucket,
and over any window of W seconds a tenant's calls stay within what the bucket gives over
W plus one lease: capacity + rate x (W + lease). A call finding the bucket empty is
refused with `rate_limited` and told how long until a token is back. A KV that does not
answer fails closed: the call is refused with `unavailable` (docs/scaling.md, "Quotas per
tenant").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import anyio
import msgspec
import nats.errors

from bastion.proto import errors as codes
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError
from bastion.shared.kv import KeptChanging, TypedBucket

__all__ = ["QuotaUnavailable", "RateLimited", "TenantRates"]

_BUCKET_TTL_S: Final = 3600.0
"""A tenant idle this long is forgotten: its bucket would be full again anyway."""
_ATTEMPTS: Final = 50
"""Compare-and-set attempts of one lease: replicas racing for a tenant's bucket retry."""


class RateLimited(BastionError):
    """A tenant made more calls per second than its quota."""

    code = codes.RATE_LIMITED


class QuotaUnavailable(BastionError):
    """The store of the calls-per-second quota did not answer: the call is not let through."""

    code = codes.UNAVAILABLE


class _Shared(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant's bucket as every replica sees it: tokens left at `at` (the epoch's seconds)."""

    tokens: float
    at: float


@dataclass
class _Lease:
    """Tokens this instance took from a tenant's bucket, spendable until `until`."""

    tokens: int
    until: float


class TenantRates:
    """One shared token bucket per tenant; `per_s` of 0 turns the quota off."""

    def __init__(
        self,
        per_s: float,
        bucket: TypedBucket[_Shared] | None,
        *,
        lease_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._per_s = per_s
        self._bucket = bucket
        self._lease_s = lease_s
        self._clock = clock
        self._leases: dict[str, _Lease] = {}
        self._locks: dict[str, anyio.Lock] = {}

    @classmethod
    async def open(
        cls,
        client: Client,
        bucket: str,
        per_s: float,
        *,
        lease_s: float,
        clock: Callable[[], float] = time.time,
    ) -> TenantRates:
        """The quota of `per_s` calls per second per tenant, kept in `bucket` (created if
        missing, and only when there is a quota); batches leased for `lease_s`."""
        shared = (
            await TypedBucket.open(client, bucket, _Shared, ttl_s=_BUCKET_TTL_S) if per_s else None
        )
        return cls(per_s, shared, lease_s=lease_s, clock=clock)

    @property
    def enabled(self) -> bool:
        return self._per_s > 0 and self._bucket is not None

    @property
    def batch(self) -> int:
        """How many tokens one lease takes at most."""
        return max(1, int(self._per_s * self._lease_s))

    async def take(self, tenant: str) -> None:
        """Spend one of `tenant`'s tokens, leasing a batch when this instance has none.

        Raises:
            RateLimited: none left; the message says when the next one is back.
            QuotaUnavailable: a lease was needed and the quota's store did not answer.
        """
        if not self.enabled:
            return
        lock = self._locks.setdefault(tenant, anyio.Lock(fast_acquire=True))
        try:
            async with lock:
                lease = self._leases.get(tenant)
                if lease is None or lease.tokens < 1 or self._clock() >= lease.until:
                    lease = await self._lease(tenant)
                    self._leases[tenant] = lease
                lease.tokens -= 1
                if not lease.tokens:
                    del self._leases[tenant]
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(tenant, None)

    async def _lease(self, tenant: str) -> _Lease:
        """Take up to `batch` whole tokens from the tenant's shared bucket."""
        assert self._bucket is not None
        capacity = max(1.0, self._per_s)
        taken = 0
        wait_s = 0.0
        now = 0.0

        def lease(found: _Shared | None) -> _Shared | None:
            nonlocal taken, wait_s, now
            now = self._clock()
            if found is None:
                tokens, at = capacity, now
            else:
                refill = max(0.0, now - found.at) * self._per_s
                tokens, at = min(capacity, found.tokens + refill), max(found.at, now)
            taken = min(self.batch, int(tokens))
            if not taken:
                wait_s = (1.0 - tokens) / self._per_s
                return None
            return _Shared(tokens=tokens - taken, at=at)

        try:
            await self._bucket.update(tenant.encode().hex(), lease, attempts=_ATTEMPTS)
        except (KeptChanging, nats.errors.Error) as error:
            raise QuotaUnavailable(
                f"tenant {tenant}'s calls-per-second quota could not be read from NATS KV "
                f"({self._bucket.name}): nothing ran; retry the call (the same call_id is safe)"
            ) from error
        if not taken:
            raise RateLimited(
                f"tenant {tenant} is over its quota of {self._per_s:g} calls per second: retry "
                f"in {wait_s:.2f} s (the same call_id is safe), or raise "
                "BASTION_TENANT_CALLS_PER_S"
            )
        return _Lease(taken, now + self._lease_s)
