"""Calls per second per tenant: a token bucket each, so one greedy agent cannot starve others.

A tenant's bucket holds up to one second of calls (`BASTION_TENANT_CALLS_PER_S`) and
refills continuously; a call finding it empty is refused with `rate_limited` and told how
long until a token is back. The buckets live in the orchestrator instance: with N replicas
behind the queue group a tenant gets up to N times the rate (`bastion up --replicas N`
divides the rate among its instances).
"""

from __future__ import annotations

import time

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError

__all__ = ["RateLimited", "TenantRates"]


class RateLimited(BastionError):
    """A tenant made more calls per second than its quota."""

    code = codes.RATE_LIMITED


class _Bucket:
    def __init__(self, capacity: float, now: float) -> None:
        self.tokens = capacity
        self.at = now


class TenantRates:
    """One token bucket per tenant; `per_s` of 0 turns the quota off."""

    def __init__(self, per_s: float) -> None:
        self._per_s = per_s
        self._buckets: dict[str, _Bucket] = {}

    @property
    def enabled(self) -> bool:
        return self._per_s > 0

    def take(self, tenant: str) -> None:
        """Spend one of `tenant`'s tokens.

        Raises:
            RateLimited: none left; the message says when the next one is back.
        """
        if not self.enabled:
            return
        now = time.monotonic()
        capacity = max(1.0, self._per_s)
        bucket = self._buckets.setdefault(tenant, _Bucket(capacity, now))
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at) * self._per_s)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return
        wait_s = (1.0 - bucket.tokens) / self._per_s
        raise RateLimited(
            f"tenant {tenant} is over its quota of {self._per_s:g} calls per second: retry in "
            f"{wait_s:.2f} s (the same call_id is safe), or raise BASTION_TENANT_CALLS_PER_S"
        )
