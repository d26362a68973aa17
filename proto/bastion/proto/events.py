"""Events the orchestrator publishes about sessions and calls, and the sandbox service about
background tasks, for audit, watchers and the MCP front door."""

from __future__ import annotations

from datetime import datetime

from bastion.proto._base import Message, SessionId
from bastion.proto.policy import Outcome
from bastion.proto.tasks import Label
from bastion.proto.toolinput import TaskId, TaskStatus

__all__ = ["CallDecided", "CallFinished", "Event", "SessionClosed", "SessionOpened", "TaskEnded"]


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


class TaskEnded(Message, frozen=True, kw_only=True, tag="event.task_ended"):
    """A background task ended on its own: it exited, or its time ran out (`error` is
    `timeout`). One stopped by `bg_stop`, its session closing or its service stopping is
    never told. Never its output: `bg_output` reads that."""

    session_id: SessionId
    tenant: str
    task_id: TaskId
    label: Label
    status: TaskStatus
    exit_code: int | None = None
    error: str = ""
    at: datetime


Event = SessionOpened | CallDecided | CallFinished | SessionClosed | TaskEnded
