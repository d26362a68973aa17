"""Parked calls kept in the JetStream KV bucket `bastion_approvals`, changed by compare-and-set.

The compare-and-set is what makes an approval run its call exactly once: of two answers
racing for one pending call, only the one whose pending → running write lands runs it.
"""

from __future__ import annotations

from collections.abc import Callable

from bastion.proto.approvals import ApprovalState, ParkedCall
from bastion.shared.bus import Client
from bastion.shared.kv import NotStored, TypedBucket
from bastion.shared.metrics import approvals_waiting

__all__ = ["ApprovalStore"]

_ATTEMPTS = 50
"""A move is read and tried again this often when other answers keep writing first."""


def _missing(request_id: str) -> NotStored:
    return NotStored(
        f"there is no approval request {request_id}: list them with `bastion approvals list`"
    )


class ApprovalStore:
    """Create, read, list and move parked calls from one state to the next."""

    def __init__(self, bucket: TypedBucket[ParkedCall]) -> None:
        self._bucket = bucket

    @classmethod
    async def open(cls, client: Client, bucket: str) -> ApprovalStore:
        """The store on `bucket`, created (file storage, one revision kept) if missing."""
        return cls(await TypedBucket.open(client, bucket, ParkedCall))

    async def create(self, parked: ParkedCall) -> None:
        await self._bucket.create(parked.request_id, parked)
        if parked.state == "pending":
            approvals_waiting.add(1)

    async def get(self, request_id: str) -> tuple[ParkedCall, int]:
        """The parked call and its revision.

        Raises:
            NotFound: no parked call has that id.
        """
        found = await self._bucket.find(request_id)
        if found is None:
            raise _missing(request_id)
        return found.value, found.revision

    async def move(
        self,
        request_id: str,
        expected: tuple[ApprovalState, ...],
        change: Callable[[ParkedCall], ParkedCall],
    ) -> ParkedCall | None:
        """`change` applied if the call is in one of the `expected` states when written
        (compare-and-set); None if it is not, or another writer got there first."""
        was: list[ApprovalState] = []

        def moved(parked: ParkedCall | None) -> ParkedCall | None:
            if parked is None:
                raise _missing(request_id)
            was[:] = [parked.state]
            return change(parked) if parked.state in expected else None

        changed = await self._bucket.update(request_id, moved, attempts=_ATTEMPTS)
        if changed is not None and was == ["pending"] and changed.state != "pending":
            approvals_waiting.add(-1)
        return changed

    async def every(self) -> list[ParkedCall]:
        """Every parked call in the bucket, oldest first."""
        found = [entry.value async for entry in self._bucket.iterate()]
        return sorted(found, key=lambda p: p.created_at)
