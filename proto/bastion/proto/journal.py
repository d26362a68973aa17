"""The journal: one entry per non-idempotent call, so an identical call is never made twice."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from bastion.proto._base import Message, SessionId
from bastion.proto.policy import PolicyDecision

__all__ = ["JournalEntry", "JournalState"]

JournalState = Literal["started", "done", "uncertain"]
"""`started`: sent to the service that runs it, no answer yet; `done`: answered, its text
kept; `uncertain`: no answer came (a timeout, a service died), so it may or may not have
taken effect."""


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
    """Why an `uncertain` call got no answer, in words (`no answer within 10 s`)."""
