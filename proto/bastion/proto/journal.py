"""The journal: one entry per non-idempotent call, so an identical call is never made twice;
and each call's record by call id, so a call sent again is never made twice either."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from bastion.proto._base import Message, SessionId
from bastion.proto.errors import ErrorReply
from bastion.proto.policy import Effect, PolicyDecision

__all__ = ["CallRecord", "CallState", "JournalEntry", "JournalState"]

JournalState = Literal["started", "done", "uncertain", "cancelled"]
"""`started`: sent to the service that runs it, no answer yet; `done`: answered, its text
kept; `uncertain`: no answer came (a timeout, a service died), so it may or may not have
taken effect; `cancelled`: someone cancelled it while it ran (`why` says who), so it may
have taken effect in part."""


class JournalEntry(Message, frozen=True, kw_only=True, tag="journal.entry"):
    """A journaled call, keyed in the journal by the hash of (session, tool, input)."""

    session_id: SessionId
    tool: str
    call_id: str
    state: JournalState
    started_at: datetime
    finished_at: datetime | None = None
    text: str = ""
    """The text the model was shown, once `done` (cut, and said so, past the journal's bound)."""
    decision: PolicyDecision | None = None
    """The decision that let the call run, shown again when the journal answers."""
    why: str = ""
    """Why an `uncertain` call got no answer, in words (`no answer within 10 s`), or who
    cancelled a `cancelled` one."""


CallState = Literal["running", "done"]
"""`running`: sent to the service that runs it, no outcome yet; `done`: its outcome kept
(a result, or an error: `uncertain` when no answer came)."""


class CallRecord(Message, frozen=True, kw_only=True, tag="call.record"):
    """A call that ran (or runs) under a call id, keyed by a hash of session and call id."""

    session_id: SessionId
    call_id: str
    tool: str
    state: CallState
    started_at: datetime
    holder: str = ""
    """The orchestrator instance that runs it (its turn holder)."""
    effect: Effect | None = None
    decision: PolicyDecision | None = None
    text: str = ""
    """Its text once `done` without an error (cut, and said so, past the bound)."""
    error: ErrorReply | None = None
    """Its error once `done` with one."""
