"""The tasks bucket: each background task's record, each change of its state a
compare-and-set (a terminal state is never left, and a stop racing the task's exit ends in
exactly one state), each tenant's live tasks, counted across every sandbox replica, and
each `bg_run` call's claim on the task it starts, so a start asked again with its call id
is answered with that task instead of starting another, and each closed session's mark, so
no replica starts a task in a session closed meanwhile."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from typing import Final

import msgspec

from bastion.proto.errors import ErrorReply
from bastion.proto.tasks import LIVE_STATUSES, TaskRecord
from bastion.shared.bus import Client
from bastion.shared.errors import NotFound, Unavailable
from bastion.shared.kv import AlreadyStored, TypedBucket

__all__ = ["ClosedSession", "LiveTasks", "TaskClaim", "TaskStore", "new_task_id"]

_CROCKFORD: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_task_id() -> str:
    """A ULID: 48 bits of milliseconds, then 80 random bits, in Crockford's base32."""
    number = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(number >> (5 * i)) & 31] for i in reversed(range(26)))


class LiveTasks(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant's live tasks: each id with its session's."""

    tasks: dict[str, str] = {}


class TaskClaim(msgspec.Struct, frozen=True, kw_only=True):
    """The task a `bg_run` call starts (its id, made before it is started), and whether it
    has started, or the error its start was refused with (nothing ran): its start is made
    once per call id, and every sending of it is answered alike."""

    task_id: str
    started: bool = False
    refused: ErrorReply | None = None


class ClosedSession(msgspec.Struct, frozen=True, kw_only=True):
    """A session's close, marked for every sandbox replica: a start of one of its tasks
    waiting for a slot (on any replica) is refused once it has one."""

    at: float


def _hex(text: str) -> str:
    return text.encode().hex()


RECORDS_KEPT_S: Final = 7 * 24 * 3600.0
"""How long a task's record is kept after its last change: a week, as ended tasks' logs
are kept while their session lives."""


class TaskStore:
    """The records of background tasks, by tenant, session and id."""

    def __init__(self, records: TypedBucket[TaskRecord]) -> None:
        self._records = records
        self._live = records.holding(LiveTasks)
        self._claims = records.holding(TaskClaim)
        self._closed = records.holding(ClosedSession)

    @classmethod
    async def open(cls, client: Client, bucket: str) -> TaskStore:
        """The store on `bucket`, created if missing, each record kept `RECORDS_KEPT_S`
        after its last change (longer than any task may run)."""
        return cls(await TypedBucket.open(client, bucket, TaskRecord, ttl_s=RECORDS_KEPT_S))

    @staticmethod
    def key(tenant: str, session_id: str, task_id: str) -> str:
        """Where a task's record is kept."""
        return f"task.{_hex(tenant)}.{session_id}.{task_id}"

    async def admit(self, record: TaskRecord, *, per_session: int, per_tenant: int) -> None:
        """Count `record` among its tenant's live tasks and keep it, or refuse it.

        Raises:
            Unavailable: its session or its tenant has as many live tasks as it may.
        """

        def counted(live: LiveTasks | None) -> LiveTasks:
            tasks = dict(live.tasks) if live is not None else {}
            mine = sum(1 for session in tasks.values() if session == record.session_id)
            if mine >= per_session:
                raise Unavailable(
                    f"this session has {mine} background tasks running, as many as it may "
                    f"(BASTION_TASKS_MAX_PER_SESSION={per_session}): stop one with bg_stop, "
                    "or wait for one to end (bg_list shows them)"
                )
            if len(tasks) >= per_tenant:
                raise Unavailable(
                    f"this tenant has {len(tasks)} background tasks running across its "
                    f"sessions, as many as it may (BASTION_TASKS_MAX_PER_TENANT={per_tenant}): "
                    "stop one with bg_stop, or wait for one to end"
                )
            tasks[record.id] = record.session_id
            return LiveTasks(tasks=tasks)

        await self._live.update(f"live.{_hex(record.tenant)}", counted, attempts=20)
        await self._records.create(self.key(record.tenant, record.session_id, record.id), record)

    @staticmethod
    def _claim_key(tenant: str, session_id: str, call_id: str) -> str:
        digest = hashlib.sha256(call_id.encode()).hexdigest()[:40]
        return f"call.{_hex(tenant)}.{session_id}.{digest}"

    async def claim(
        self, tenant: str, session_id: str, call_id: str, task_id: str
    ) -> TaskClaim | None:
        """Claim the start of `task_id` for the call `call_id` of the session: None when
        this one made the claim (start it), else the claim an earlier sending made."""
        key = self._claim_key(tenant, session_id, call_id)
        for _ in range(5):
            try:
                await self._claims.create(key, TaskClaim(task_id=task_id))
            except AlreadyStored:
                found = await self._claims.find(key)
                if found is not None:
                    return found.value
                continue  # the earlier sending's start failed meanwhile: claim it again
            return None
        raise Unavailable(
            f"the start of this call's background task (call id {call_id}) kept changing: "
            "call bg_run again"
        )

    async def claimed(self, tenant: str, session_id: str, call_id: str) -> TaskClaim | None:
        """The claim the call `call_id` of the session holds, or None."""
        found = await self._claims.find(self._claim_key(tenant, session_id, call_id))
        return found.value if found is not None else None

    async def started(self, tenant: str, session_id: str, call_id: str) -> None:
        """The call's task has started: a sending of it again is answered with it."""
        key = self._claim_key(tenant, session_id, call_id)
        await self._claims.update(
            key,
            lambda claim: None if claim is None else TaskClaim(task_id=claim.task_id, started=True),
        )

    async def refused(
        self, tenant: str, session_id: str, call_id: str, refusal: ErrorReply
    ) -> None:
        """The call's start was refused, having started nothing: a sending of it again is
        answered with the same refusal."""
        key = self._claim_key(tenant, session_id, call_id)
        await self._claims.update(
            key,
            lambda claim: (
                None if claim is None else TaskClaim(task_id=claim.task_id, refused=refusal)
            ),
        )

    async def close(self, tenant: str, session_id: str) -> None:
        """Mark the session closed: no task of it starts any more, on any replica (kept
        as long as records)."""
        await self._closed.put(f"closed.{_hex(tenant)}.{session_id}", ClosedSession(at=time.time()))

    async def closed(self, tenant: str, session_id: str) -> bool:
        """Whether the session was marked closed."""
        return await self._closed.find(f"closed.{_hex(tenant)}.{session_id}") is not None

    async def unclaim(self, tenant: str, session_id: str, call_id: str) -> None:
        """The call's start failed, having started nothing: a sending of it again starts it."""
        await self._claims.delete(self._claim_key(tenant, session_id, call_id))

    async def _let_go(self, record: TaskRecord) -> None:
        """No longer count `record` among its tenant's live tasks."""

        def without(live: LiveTasks | None) -> LiveTasks | None:
            if live is None or record.id not in live.tasks:
                return None
            return LiveTasks(tasks={k: v for k, v in live.tasks.items() if k != record.id})

        await self._live.update(f"live.{_hex(record.tenant)}", without, attempts=20)

    async def find(self, tenant: str, session_id: str, task_id: str) -> TaskRecord | None:
        """The session's task `task_id`, or None (another session's is None too)."""
        found = await self._records.find(self.key(tenant, session_id, task_id))
        return found.value if found is not None else None

    async def get(self, tenant: str, session_id: str, task_id: str) -> TaskRecord:
        """The session's task `task_id`.

        Raises:
            NotFound: this session has no such task.
        """
        found = await self.find(tenant, session_id, task_id)
        if found is None:
            raise NotFound(
                f"this session has no background task {task_id}: bg_list shows its tasks"
            )
        return found

    async def change(
        self, record: TaskRecord, change: Callable[[TaskRecord], TaskRecord | None]
    ) -> TaskRecord | None:
        """`change` applied to the task's current record by compare-and-set (None from it:
        nothing changes); what was written, or None. A task that ends stops being counted
        among its tenant's live tasks."""

        def changed(current: TaskRecord | None) -> TaskRecord | None:
            return change(current) if current is not None else None

        key = self.key(record.tenant, record.session_id, record.id)
        written = await self._records.update(key, changed, attempts=20)
        if written is not None and written.status not in LIVE_STATUSES:
            await self._let_go(written)
        return written

    async def of_session(self, tenant: str, session_id: str) -> list[TaskRecord]:
        """The session's tasks, newest first."""
        prefix = f"task.{_hex(tenant)}.{session_id}."
        found = [entry.value async for entry in self._records.iterate(prefix)]
        return sorted(found, key=lambda record: record.id, reverse=True)

    async def forget(self, record: TaskRecord) -> None:
        """Remove an ended task's record (its session closed, or it is past what the
        session keeps)."""
        await self._records.delete(self.key(record.tenant, record.session_id, record.id))

    async def unfinished(self, owner: str) -> list[TaskRecord]:
        """Every live task `owner` runs, of every tenant and session."""
        return [
            entry.value
            async for entry in self._records.iterate("task.")
            if entry.value.owner == owner and entry.value.status in LIVE_STATUSES
        ]
