"""The audit log: every decision, call and result of a session, into a stream nobody rewrites.

Records go to the JetStream stream `bastion_audit` on `bastion.v1.audit.<tenant>.<session>`
(so `bastion audit show SESSION` is a subject filter). The stream is file-backed and
refuses deletes and purges. A record holds summaries, bounded to 200 characters: a call's
input with every file content replaced by its size, a result's size or error code — never
a tool's whole input or output, and never a secret value (the orchestrator holds none).

Within `AuditLog.together()` (a call, from its decision to its answer) records are sent
as they come, in order on the one connection — each published before `record` returns, so
before whatever the call sends next (its request to the sandbox) — and their
acknowledgements are awaited together when the block ends, before the call is answered:
one wait instead of three, and no task per record.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Final

import anyio
import msgspec

from bastion.proto import errors as codes
from bastion.proto.audit import MAX_SUMMARY, AuditRecord
from bastion.proto.errors import ErrorReply
from bastion.proto.policy import PolicyDecision
from bastion.proto.session import SessionInfo
from bastion.proto.tools import CallParked, CallResult
from bastion.shared.audit import audit_record, confirm_record, open_audit_stream, send_record
from bastion.shared.bus import Client, Stored

__all__ = [
    "CONTENT_FIELDS",
    "AuditLog",
    "bounded",
    "error_code_of",
    "input_summary",
    "open_audit_stream",
]

logger = logging.getLogger(__name__)


class _Sent:
    """The records sent within one `AuditLog.together()`, their acknowledgements to await;
    once `closed` (the block ended), a record is acknowledged as it is sent."""

    def __init__(self) -> None:
        self.records: list[tuple[AuditRecord, Stored | None]] = []
        self.closed = False


_sent: ContextVar[_Sent | None] = ContextVar("_sent", default=None)
"""Within `AuditLog.together()`: the records sent in it, their acknowledgements to await."""

CONTENT_FIELDS: Final = frozenset({"content", "old_string", "new_string", "patch", "text"})
"""Input fields that carry file contents: the audit keeps only their size."""


def bounded(text: str, limit: int = MAX_SUMMARY) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def input_summary(tool_input: dict[str, Any]) -> str:
    """A call's input for the audit: file contents as their size, the whole cut to 200."""
    shown: dict[str, Any] = {}
    for name, value in sorted(tool_input.items()):
        if name in CONTENT_FIELDS and isinstance(value, str):
            shown[name] = f"<{len(value.encode())} bytes>"
        elif isinstance(value, str | int | float | bool) or value is None:
            shown[name] = value
        else:
            shown[name] = f"<{type(value).__name__}>"
    return bounded(msgspec.json.encode(shown).decode())


def error_code_of(result: CallResult) -> str:
    """The code a result counts under: its error's, `waiting_for_approval` for a parked
    call, empty for an output."""
    if isinstance(result, ErrorReply):
        return result.code
    return codes.WAITING_FOR_APPROVAL if isinstance(result, CallParked) else ""


def result_summary(result: CallResult) -> str:
    """A result for the audit: its size, or its error's code and first line (never content)."""
    if isinstance(result, ErrorReply | CallParked):
        return bounded(result.message.split("\n", 1)[0])
    first = result.text.split("\n", 1)[0]
    if first.startswith("[answered from the journal"):
        return f"answered from the journal, {len(result.text)} characters"
    return f"{len(result.text)} characters"


class AuditLog:
    """Publishes a session's audit records; a record that cannot be stored is logged."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @classmethod
    async def open(cls, client: Client) -> AuditLog:
        """The log on `client`, the audit stream created if it is missing."""
        await open_audit_stream(client)
        return cls(client)

    @asynccontextmanager
    async def together(self) -> AsyncIterator[None]:
        """Records of the block are sent at once, in order, and acknowledged together at its
        end, even when the block was cancelled or raised (a record not stored is logged,
        as always)."""
        sent = _Sent()
        token = _sent.set(sent)
        try:
            yield
        finally:
            _sent.reset(token)
            sent.closed = True
            with anyio.CancelScope(shield=True):
                for record, stored in sent.records:
                    await confirm_record(record, stored)

    async def record(self, session: SessionInfo, action: str, **fields: str) -> None:
        bounded_fields = {k: bounded(v) for k, v in fields.items()}
        record = audit_record(action, session.session_id, session.tenant, **bounded_fields)
        stored = await send_record(self._client, record)
        sent = _sent.get()
        if sent is None or sent.closed:
            await confirm_record(record, stored)
        else:
            sent.records.append((record, stored))

    async def decision(
        self,
        session: SessionInfo,
        call_id: str,
        tool: str,
        decision: PolicyDecision,
        *,
        parent_call_id: str = "",
    ) -> None:
        await self.record(
            session,
            "decision",
            call_id=call_id,
            tool=tool,
            outcome=decision.outcome,
            rule=decision.rule,
            summary=decision.reason,
            parent_call_id=parent_call_id,
        )

    async def call(
        self,
        session: SessionInfo,
        call_id: str,
        tool: str,
        tool_input: dict[str, Any],
        *,
        parent_call_id: str = "",
    ) -> None:
        await self.record(
            session,
            "call",
            call_id=call_id,
            tool=tool,
            summary=input_summary(tool_input),
            parent_call_id=parent_call_id,
        )

    async def result(
        self,
        session: SessionInfo,
        call_id: str,
        tool: str,
        result: CallResult,
        *,
        parent_call_id: str = "",
    ) -> None:
        outcome = error_code_of(result) or "ok"
        await self.record(
            session,
            "result",
            call_id=call_id,
            tool=tool,
            outcome=outcome,
            summary=result_summary(result),
            parent_call_id=parent_call_id,
        )
