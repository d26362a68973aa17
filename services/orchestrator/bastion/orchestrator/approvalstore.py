"""Parked calls kept in the JetStream KV bucket `bastion_approvals`, changed by compare-and-set.

The compare-and-set is what makes an approval run its call exactly once: of two answers
racing for one pending call, only the one whose pending → running write lands runs it.
"""

from __future__ import annotations

from collections.abc import Callable

import nats.js.errors
from nats.js.kv import KeyValue

from bastion.proto.approvals import ApprovalState, ParkedCall
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.errors import NotFound
from bastion.shared.kv import bucket_keys, open_bucket
from bastion.shared.metrics import approvals_waiting

__all__ = ["ApprovalStore"]


class ApprovalStore:
    """Create, read, list and move parked calls from one state to the next."""

    def __init__(self, client: Client, kv: KeyValue) -> None:
        self._client = client
        self._kv = kv

    @classmethod
    async def open(cls, client: Client, bucket: str) -> ApprovalStore:
        """The store on `bucket`, created (file storage, one revision kept) if missing."""
        kv = await open_bucket(client, bucket)
        return cls(client, kv)

    async def create(self, parked: ParkedCall) -> None:
        await self._kv.create(parked.request_id, encode(parked))
        if parked.state == "pending":
            approvals_waiting.add(1)

    async def get(self, request_id: str) -> tuple[ParkedCall, int]:
        """The parked call and its revision.

        Raises:
            NotFound: no parked call has that id.
        """
        try:
            entry = await self._kv.get(request_id)
        except nats.js.errors.KeyNotFoundError:
            raise NotFound(
                f"there is no approval request {request_id}: list them with "
                "`bastion approvals list`"
            ) from None
        assert entry.value is not None and entry.revision is not None
        return decode(entry.value, ParkedCall), entry.revision

    async def move(
        self,
        request_id: str,
        expected: tuple[ApprovalState, ...],
        change: Callable[[ParkedCall], ParkedCall],
    ) -> ParkedCall | None:
        """`change` applied if the call is in one of the `expected` states when written
        (compare-and-set); None if it is not, or another writer got there first."""
        while True:
            parked, revision = await self.get(request_id)
            if parked.state not in expected:
                return None
            changed = change(parked)
            try:
                await self._kv.update(request_id, encode(changed), last=revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # someone else wrote: look again at the state they left
            if parked.state == "pending" and changed.state != "pending":
                approvals_waiting.add(-1)
            return changed

    async def every(self) -> list[ParkedCall]:
        """Every parked call in the bucket, oldest first."""
        found: list[ParkedCall] = []
        for key in await bucket_keys(self._client, self._kv):
            try:
                parked, _ = await self.get(key)
            except NotFound:
                continue  # removed between the listing and the read
            found.append(parked)
        return sorted(found, key=lambda p: p.created_at)
