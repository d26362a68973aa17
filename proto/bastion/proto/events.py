"""Events the orchestrator publishes about sessions and calls, for audit and watchers."""

from __future__ import annotations

from datetime import datetime

from bastion.proto._base import Message, SessionId
from bastion.proto.policy import Outcome

__all__ = ["CallDecided", "CallFinished", "Event", "SessionClosed", "SessionOpened"]


class SessionOpened(Message, frozen=True, kw_only=True, tag="event.session_opened"):
    session_id: SessionId
    tenant: str
    agent: str
    autonomy: str
    at: datetime


class CallDecided(Message, frozen=True, kw_only=True, tag="event.call_decided"):
    session_id: SessionId
    tenant: str
    call_id: str
    tool: str
    outcome: Outcome
    rule: str
    at: datetime


class CallFinished(Message, frozen=True, kw_only=True, tag="event.call_finished"):
    """A call ended: `error_code` is empty when it produced output."""

    session_id: SessionId
    tenant: str
    call_id: str
    tool: str
    error_code: str
    duration_s: float
    at: datetime


class SessionClosed(Message, frozen=True, kw_only=True, tag="event.session_closed"):
    session_id: SessionId
    tenant: str
    calls: int
    at: datetime


Event = SessionOpened | CallDecided | CallFinished | SessionClosed
