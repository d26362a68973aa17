"""The journal: a non-idempotent call is made at most once per (session, tool, input).

Each journaled call has an entry in the KV bucket `bastion_journal`, keyed by the SHA-256
of the canonical JSON (sorted keys, no whitespace, UTF-8) of its session, tool and input
(the input as the tool takes it, defaults filled, so `{}` and `{"replace_all": false}` are
one call). The entry is created (compare-and-set: only if absent) before the call is sent
and holds its answer once one comes. Then an identical call is answered from the entry,
and one whose entry is still `started` or `uncertain` — the earlier call never got an
answer — is refused as uncertain: it may or may not have taken effect, and nothing here
retries it. One whose entry is `cancelled` — someone cancelled it while it ran — is
refused as `cancelled`, saying who, for the same reason.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import msgspec

from bastion.orchestrator.catalogue import is_journaled
from bastion.proto import errors as codes
from bastion.proto.journal import JournalEntry
from bastion.proto.policy import PolicyDecision
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError, Cancelled, Unavailable
from bastion.shared.kv import AlreadyStored, ChangedSince, TypedBucket

__all__ = ["MAX_KEPT_TEXT", "Journal", "UncertainCall", "call_key"]

logger = logging.getLogger(__name__)

MAX_KEPT_TEXT = 256 * 1024
"""The most of a result's text an entry keeps (a KV value must fit in one NATS message)."""


class UncertainCall(BastionError):
    """A call got no answer, so whether it took effect is unknown; it is not made again."""

    code = codes.UNCERTAIN


def call_key(session_id: str, tool: str, tool_input: msgspec.Struct) -> str:
    """The journal key of a call: SHA-256 of its canonical JSON, in hex."""
    given = msgspec.to_builtins(tool_input)
    tag_field = type(tool_input).__struct_config__.tag_field
    if tag_field is not None:
        del given[tag_field]  # the struct's name, not part of what was asked
    canonical = msgspec.json.encode(
        {"input": given, "session": session_id, "tool": tool}, order="sorted"
    )
    return hashlib.sha256(canonical).hexdigest()


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _not_again(tool: ToolSpec) -> str:
    where = (
        f"ask MCP server {tool.server} (its tools that read) what it holds"
        if tool.server
        else "look at the workspace (read the file, list the directory)"
    )
    return (
        f"so it is not made again: {where} to see what happened, and make a different call "
        "if something is still needed"
    )


def _check_advice(tool: ToolSpec) -> str:
    return f"it may or may not have taken effect, {_not_again(tool)}"


def _unanswered(error: BastionError) -> bool:
    """No answer came (a timeout, a service or upstream server gone): nobody knows whether
    the call took effect. An upstream MCP server that stopped mid-call is reported by the
    mcp service with the code `uncertain`."""
    return isinstance(error, Unavailable) or error.code == codes.UNCERTAIN


class Journal:
    """Look up, record and answer journaled calls in the `bastion_journal` bucket."""

    def __init__(self, bucket: TypedBucket[JournalEntry]) -> None:
        self._bucket = bucket

    @classmethod
    async def open(cls, client: Client, bucket: str, ttl_s: float) -> Journal:
        """The journal on `bucket`, created (file storage, entries kept `ttl_s`) if missing."""
        return cls(await TypedBucket.open(client, bucket, JournalEntry, ttl_s=ttl_s))

    async def recall(
        self, session: SessionInfo, tool: ToolSpec, tool_input: msgspec.Struct, call_id: str
    ) -> ToolOutput | None:
        """The journal's answer to this call, or None if it is not journaled or never made.

        Raises:
            UncertainCall: an identical call was made and got no answer.
            Cancelled: an identical call was made and cancelled while it ran.
        """
        if not is_journaled(tool):
            return None
        key = call_key(session.session_id, tool.name, tool_input)
        found = await self._bucket.find(key)
        if found is None:
            return None
        entry, revision = found.value, found.revision
        if entry.state == "cancelled":
            raise Cancelled(
                f"an identical {tool.name} call was made at {_when(entry.started_at)} and "
                f"cancelled while it ran ({entry.why}): it may have taken effect in part, "
                f"{_not_again(tool)}"
            )
        if entry.state != "done":
            if entry.state == "started":
                # Nobody is waiting on it any more (a session's journaled calls run alone, in
                # its turn across replicas: see turns):
                # whoever sent it died before the answer came.
                entry = msgspec.structs.replace(
                    entry, state="uncertain", why="whoever sent it stopped before an answer came"
                )
                await self._write(key, entry, revision)
            raise UncertainCall(
                f"an identical {tool.name} call was made at {_when(entry.started_at)} and got "
                f"no answer ({entry.why or 'no reason known'}): {_check_advice(tool)}"
            )
        assert entry.decision is not None
        return ToolOutput(
            call_id=call_id,
            tool=tool.name,
            effect=tool.effect,
            text=(
                f"[answered from the journal: this exact call already ran at "
                f"{_when(entry.started_at)}; it was not made again]\n{entry.text}"
            ),
            decision=entry.decision,
            duration_s=0.0,
        )

    async def run(
        self,
        session: SessionInfo,
        tool: ToolSpec,
        tool_input: msgspec.Struct,
        call_id: str,
        *,
        decision: PolicyDecision,
        make: Callable[[], Awaitable[str]],
    ) -> str:
        """Make the call with `make`, recording it first when it is journaled.

        A call that is not journaled is made as it comes; if it gets no answer it is
        uncertain too (its record by call id keeps it from being made again).

        Raises:
            UncertainCall: the call got no answer (or an identical one is in flight).
            Cancelled: it was cancelled while it ran (its entry says so from then on).
        """
        if not is_journaled(tool):
            try:
                return await make()
            except BastionError as error:
                if not _unanswered(error):
                    raise
                if error.code == codes.UNCERTAIN:
                    raise UncertainCall(f"{error.message}, {_not_again(tool)}") from None
                raise UncertainCall(
                    f"this {tool.name} call got no answer ({error.message}): {_check_advice(tool)}"
                ) from None
        key = call_key(session.session_id, tool.name, tool_input)
        entry = JournalEntry(
            session_id=session.session_id,
            tool=tool.name,
            call_id=call_id,
            state="started",
            started_at=datetime.now(UTC),
            decision=decision,
        )
        try:
            revision = await self._bucket.create(key, entry)
        except AlreadyStored:
            raise UncertainCall(
                f"an identical {tool.name} call is already being made: {_check_advice(tool)}"
            ) from None
        try:
            text = await make()
        except BastionError as error:
            if error.code == codes.CANCELLED:  # stopped midway: it may have done a part
                entry = msgspec.structs.replace(
                    entry, state="cancelled", finished_at=datetime.now(UTC), why=error.message
                )
                await self._write(key, entry, revision)
                raise
            if not _unanswered(error):
                # An answer, though a refusal: the call changed nothing, so the same call
                # may be made again once the model has changed what made it fail.
                await self._bucket.delete(key, revision=revision)
                raise
            entry = msgspec.structs.replace(
                entry, state="uncertain", finished_at=datetime.now(UTC), why=error.message
            )
            await self._write(key, entry, revision)
            if error.code == codes.UNCERTAIN:  # the service that made it says so, and why
                raise UncertainCall(f"{error.message}, {_not_again(tool)}") from None
            raise UncertainCall(
                f"this {tool.name} call got no answer ({error.message}): {_check_advice(tool)}"
            ) from None
        kept = (
            text if len(text) <= MAX_KEPT_TEXT else text[:MAX_KEPT_TEXT] + "\n[cut in the journal]"
        )
        entry = msgspec.structs.replace(
            entry, state="done", finished_at=datetime.now(UTC), text=kept
        )
        await self._write(key, entry, revision)
        return text

    async def _write(self, key: str, entry: JournalEntry, revision: int) -> None:
        try:
            await self._bucket.replace(key, entry, revision)
        except ChangedSince:
            logger.warning("a journal entry changed under its update", extra={"state": entry.state})
            await self._bucket.put(key, entry)
