"""Each call's record by call id: a call sent again with its call id never runs twice.

A record lives in the KV bucket `bastion_calls`, keyed by the SHA-256 of the session id and
the call id. It is created `running` (compare-and-set: only if absent) in the session's
turn, just before the call is made, whatever the tool — `shell` and reads included — and
becomes `done` with the call's outcome (its text, or its error) once there is one. So a call
sent again with the same call id

- while the first still runs, waits for the session's turn, which the first holds, and then
  finds its outcome;
- after the first ended, is answered with the recorded outcome;
- found `running` by whoever holds the turn alone now was left by an orchestrator that
  stopped mid-call (a read in a shared turn that finds it so waits to hold the turn alone
  first, since it may be a read beside it): nobody knows whether it took effect, so it
  is `uncertain`, recorded so, and said so to every later sending of it. It is not made again.

A call answered with an error other than `uncertain` (refused by a hook, a file that is not
there, a lease that timed out) changed nothing: its record is dropped, as the journal drops
its entry, so the same call id may be sent again and is made then, once.

This is apart from the journal (`journal`), which answers an identical *input* of a
non-idempotent tool under any call id.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime

import msgspec

from bastion.orchestrator.callorder import NeedsTurnAlone
from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply
from bastion.proto.journal import CallRecord, CallState
from bastion.proto.policy import PolicyDecision
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client
from bastion.shared.kv import AlreadyStored, ChangedSince, TypedBucket

__all__ = ["MAX_RECORDED_TEXT", "CallRecords", "Started", "record_key"]

logger = logging.getLogger(__name__)

MAX_RECORDED_TEXT = 256 * 1024
"""The most of a result's text a record keeps (a KV value must fit in one NATS message)."""


def record_key(session_id: str, call_id: str) -> str:
    """The record's key: SHA-256 of session and call id, in hex (a call id is the
    caller's string; a key may hold only a few characters)."""
    return hashlib.sha256(f"{session_id}\0{call_id}".encode()).hexdigest()


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _kept(text: str) -> str:
    if len(text) <= MAX_RECORDED_TEXT:
        return text
    return text[:MAX_RECORDED_TEXT] + "\n[cut in the call's record]"


class Started(msgspec.Struct, frozen=True):
    """A record this instance created `running`, and its revision."""

    key: str
    record: CallRecord
    revision: int


class CallRecords:
    """Look up, start and finish calls' records in the `bastion_calls` bucket."""

    def __init__(self, bucket: TypedBucket[CallRecord], holder: str) -> None:
        self._bucket = bucket
        self._holder = holder

    @classmethod
    async def open(cls, client: Client, bucket: str, ttl_s: float, holder: str) -> CallRecords:
        """The records on `bucket` (created if missing, entries kept `ttl_s`), started as
        `holder` (this orchestrator's turn holder)."""
        return cls(await TypedBucket.open(client, bucket, CallRecord, ttl_s=ttl_s), holder)

    async def state(self, session_id: str, call_id: str) -> CallState | None:
        """The state of the call made with this call id, or None if none was."""
        found = await self._bucket.find(record_key(session_id, call_id))
        return None if found is None else found.value.state

    async def running(self, session_id: str, call_id: str) -> bool:
        """Whether the call made with this call id has no outcome yet."""
        found = await self._bucket.find(record_key(session_id, call_id))
        return found is not None and found.value.state == "running"

    async def running_tool(self, session_id: str, call_id: str) -> str | None:
        """The tool of the call made with this call id while it has no outcome yet; None
        when there is no such call or it ended."""
        found = await self._bucket.find(record_key(session_id, call_id))
        if found is None or found.value.state != "running":
            return None
        return found.value.tool

    async def recall(
        self, session_id: str, call_id: str, *, alone: bool = True
    ) -> ToolOutput | ErrorReply | None:
        """The outcome of the call made earlier with this call id, or None if none was.

        Called in the session's turn: held `alone`, a record still `running` is an
        orchestrator's that stopped mid-call, so it is made `uncertain` here, once and for
        good; in a shared turn it may be a read beside this one.

        Raises:
            NeedsTurnAlone: the record is `running` and the turn is shared.
        """
        key = record_key(session_id, call_id)
        found = await self._bucket.find(key)
        if found is None:
            return None
        record = found.value
        if record.state == "running" and not alone:
            raise NeedsTurnAlone(f"call {call_id} is being made: wait for it alone")
        if record.state == "running":
            error = ErrorReply(
                code=codes.UNCERTAIN,
                message=(
                    f"this {record.tool} call (call id {call_id}) was being made at "
                    f"{_when(record.started_at)} when the orchestrator making it stopped, so "
                    "it may or may not have taken effect; it is not made again: look at the "
                    "workspace (or ask the tool's server) to see what happened, and make a new "
                    "call, with a new call id, if something is still needed"
                ),
            )
            record = msgspec.structs.replace(record, state="done", error=error)
            logger.warning(
                "a call was running when its orchestrator stopped: uncertain",
                extra={"session": session_id, "holder": record.holder},
            )
            await self._write(key, record, found.revision)
        return self._outcome(record)

    @staticmethod
    def _outcome(record: CallRecord) -> ToolOutput | ErrorReply:
        if record.error is not None:
            return record.error
        assert record.decision is not None and record.effect is not None
        return ToolOutput(
            call_id=record.call_id,
            tool=record.tool,
            effect=record.effect,
            text=record.text,
            decision=record.decision,
            duration_s=0.0,
        )

    async def start(
        self, session: SessionInfo, tool: ToolSpec, call_id: str, decision: PolicyDecision
    ) -> Started | None:
        """The call's record, created `running`; None if the call id already has one (the
        caller answers from it: see `recall`)."""
        key = record_key(session.session_id, call_id)
        record = CallRecord(
            session_id=session.session_id,
            call_id=call_id,
            tool=tool.name,
            state="running",
            started_at=datetime.now(UTC),
            holder=self._holder,
            effect=tool.effect,
            decision=decision,
        )
        try:
            revision = await self._bucket.create(key, record)
        except AlreadyStored:
            return None
        return Started(key, record, revision)

    async def finish(
        self, started: Started, *, text: str = "", error: ErrorReply | None = None
    ) -> None:
        """The call's outcome, recorded: its text, or its error (`uncertain`)."""
        done = msgspec.structs.replace(
            started.record, state="done", text=_kept(text) if error is None else "", error=error
        )
        await self._write(started.key, done, started.revision)

    async def drop(self, started: Started) -> None:
        """The call was answered with an error that says it changed nothing: no record."""
        try:
            await self._bucket.delete(started.key, revision=started.revision)
        except ChangedSince:
            logger.warning("a call's record changed before it was dropped")

    async def _write(self, key: str, record: CallRecord, revision: int) -> None:
        try:
            await self._bucket.replace(key, record, revision)
        except ChangedSince:
            logger.warning("a call's record changed under its update", extra={"key": key})
            await self._bucket.put(key, record)
