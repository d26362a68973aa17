"""A tenant's concurrent sandboxes counted across every sandbox replica, in NATS KV: each
command's, program's or check's sandbox while it runs, and each background task while it
lives (`bastion.sandbox.tasks.runner`), so the tenant's process trees are bounded by one cap.

Each tenant has a record in `bastion_sandbox_slots` (key: the tenant's name in hex) listing
the slots held now, each with when its lease ends (seconds since the epoch). A sandbox
takes a slot by compare-and-set while fewer than the cap are listed and unexpired, renews
its lease every third of `BASTION_SANDBOX_SLOT_LEASE_S` while it runs, and removes it when
it ends. A replica that dies (kill -9) leaves its slots listed: they stop being renewed,
and once their lease ends the next look drops them, so a slot comes back within one lease
and is never lost for good. A call over the cap looks again now and then, up to
`BASTION_TENANT_WAIT_S`, then is refused as `TenantBusy` (docs/scaling.md).

Each replica keeps the record it last read or wrote, with its revision, and writes over
that revision at once: one round trip to take a slot and one to give it back while no
other replica wrote between, instead of a read before each. A record another replica
changed fails the compare-and-set (and a cap the kept record says is reached is looked up
again before it refuses), so the count is never decided on a stale record.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Final

import anyio
import msgspec
import nats.errors

from bastion.proto import errors as codes
from bastion.sandbox.tenants import TenantBusy
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError
from bastion.shared.kv import AlreadyStored, ChangedSince, KeptChanging, TypedBucket
from bastion.shared.renewing import renewing

__all__ = ["SharedSlots", "SlotRecord", "SlotsUnavailable"]

logger = logging.getLogger(__name__)

_POLL_S: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
"""How long a call over the cap waits between looks: soon first, then less often."""
_ATTEMPTS: Final = 50
_PAUSE_S: Final = 0.005
"""The pause before a compare-and-set is tried again after it lost a race twice in a row."""
_BUCKET_TTL_S: Final = 24 * 3600.0
"""A record no sandbox changed for this long is forgotten (every slot in it long expired)."""


class SlotsUnavailable(BastionError):
    """The count of a tenant's sandboxes could not be read or changed: nothing is run."""

    code = codes.UNAVAILABLE


class SlotRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The slots a tenant holds now: slot id to when its lease ends."""

    slots: dict[str, float] = msgspec.field(default_factory=dict)


class SharedSlots:
    """Counts each tenant's running sandboxes in KV against `per_tenant`, across replicas."""

    def __init__(
        self,
        bucket: TypedBucket[SlotRecord],
        per_tenant: int,
        wait_s: float,
        *,
        lease_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._bucket = bucket
        self._per_tenant = per_tenant
        self._wait_s = wait_s
        self._lease_s = lease_s
        self._clock = clock
        self._instance = f"{socket.gethostname()}:{secrets.token_hex(4)}"
        self._ids = itertools.count()
        self._known: dict[str, tuple[SlotRecord | None, int]] = {}
        """Each key's record as this replica last read or wrote it, and its revision (0:
        none was there); it may be stale, which a compare-and-set over it finds out."""

    @classmethod
    async def open(
        cls,
        client: Client,
        bucket: str,
        per_tenant: int,
        wait_s: float,
        *,
        lease_s: float,
        clock: Callable[[], float] = time.time,
    ) -> SharedSlots:
        """`per_tenant` slots per tenant in `bucket` (created if missing), each leased for
        `lease_s` at a time; a call waits at most `wait_s` for one."""
        slots = await TypedBucket.open(
            client, bucket, SlotRecord, ttl_s=max(_BUCKET_TTL_S, 3 * lease_s)
        )
        return cls(slots, per_tenant, wait_s, lease_s=lease_s, clock=clock)

    def _live(self, found: SlotRecord | None) -> dict[str, float]:
        now = self._clock()
        return {} if found is None else {k: v for k, v in found.slots.items() if v > now}

    async def _change(self, key: str, change: Callable[[dict[str, float]], bool]) -> bool:
        """Apply `change` to the live slots of `key` by compare-and-set; whether it wrote.

        The first try is over the record this replica knows; a refusal (`change` answering
        False) or a lost race on it reads the record again before deciding.

        Raises:
            KeptChanging: every attempt lost its race.
        """
        fresh = key not in self._known
        for attempt in range(_ATTEMPTS):
            if fresh:
                if attempt > 1:
                    await anyio.sleep(_PAUSE_S * (attempt % 10))
                found = await self._bucket.find(key)
                self._known[key] = (None, 0) if found is None else (found.value, found.revision)
            record, revision = self._known[key]
            live = self._live(record)
            if not change(live):
                if fresh:
                    return False
                fresh = True  # decided on a record that may be stale: look again
                continue
            written = SlotRecord(slots=live)
            try:
                if revision:
                    revision = await self._bucket.replace(key, written, revision)
                else:
                    revision = await self._bucket.create(key, written)
            except (AlreadyStored, ChangedSince):
                fresh = True
                continue
            except BaseException:
                self._known.pop(key, None)  # unknown whether it was written: read it next
                raise
            self._known[key] = (written, revision)
            return True
        raise KeptChanging(f"the count of a tenant's sandboxes ({key}) kept changing; retry")

    async def _try_take(self, tenant: str, key: str, slot_id: str) -> bool:
        """Whether the slot is taken now (False: the tenant is at its cap).

        Raises:
            SlotsUnavailable: the count could not be read or changed.
        """

        def take(live: dict[str, float]) -> bool:
            if slot_id not in live and len(live) >= self._per_tenant:
                return False
            live[slot_id] = self._clock() + self._lease_s
            return True

        try:
            return await self._change(key, take)
        except (KeptChanging, nats.errors.Error) as error:
            raise SlotsUnavailable(
                f"tenant {tenant}'s running sandboxes could not be counted in NATS KV "
                f"({self._bucket.name}): nothing ran; retry the call"
            ) from error

    async def _renew(self, key: str, slot_id: str) -> None:
        """Keep the slot's lease alive while held; a missed renewal is logged and retried
        at the next beat (a slot that expired meanwhile is listed again)."""

        def renew(live: dict[str, float]) -> bool:
            live[slot_id] = self._clock() + self._lease_s
            return True

        while True:
            await anyio.sleep(self._lease_s / 3)
            try:
                await self._change(key, renew)
            except (BastionError, nats.errors.Error) as error:
                logger.warning(
                    "a sandbox slot's lease was not renewed",
                    extra={"slot": slot_id, "error_type": type(error).__name__},
                )

    async def _give_back(self, key: str, slot_id: str) -> None:
        def remove(live: dict[str, float]) -> bool:
            live.pop(slot_id, None)
            return True

        try:
            await self._change(key, remove)
        except (BastionError, nats.errors.Error) as error:  # its lease ends on its own
            logger.warning(
                "a sandbox slot was not given back",
                extra={"slot": slot_id, "error_type": type(error).__name__},
            )

    async def _count(self, key: str) -> int:
        found = await self._bucket.find(key)
        return len(self._live(None if found is None else found.value))

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of `tenant`'s slots for the block; `TenantBusy` if none frees up in time."""
        key = tenant.encode().hex()
        slot_id = f"{self._instance}:{next(self._ids)}"
        taken = False
        with anyio.move_on_after(self._wait_s):
            for attempt in itertools.count():
                if await self._try_take(tenant, key, slot_id):
                    taken = True
                    break
                await anyio.sleep(_POLL_S[min(attempt, len(_POLL_S) - 1)])
        if not taken and not await self._try_take(tenant, key, slot_id):
            raise TenantBusy(
                f"tenant {tenant} has {await self._count(key)} sandboxes running, its cap, "
                f"and none ended within {self._wait_s:g} s: retry later, stop a background "
                "task no longer needed (each live one holds a sandbox: bg_list, bg_stop), or "
                "raise the cap (BASTION_MAX_SANDBOXES_PER_TENANT)"
            )
        try:
            async with renewing(partial(self._renew, key, slot_id)):
                yield
        finally:
            with anyio.CancelScope(shield=True):
                await self._give_back(key, slot_id)
