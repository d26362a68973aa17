"""Background tasks on the bus: the orchestrator's requests to the sandbox service for
`bg_run`, `bg_list`, `bg_output` and `bg_stop`, their answers, and a task's record as the
tasks bucket keeps it (`bastion.sandbox.tasks`; docs/architecture.md §5, "Background
tasks")."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bastion.proto._base import Identifier, Message, SessionId, Text
from bastion.proto.sandbox import ExecRequest
from bastion.proto.toolinput import (
    MAX_TASK_RUN_MS,
    BgListInput,
    BgOutputInput,
    BgStopInput,
    TaskId,
    TaskStatus,
)

__all__ = [
    "LIVE_STATUSES",
    "StoppedBy",
    "TaskList",
    "TaskListing",
    "TaskOutput",
    "TaskRead",
    "TaskRecord",
    "TaskStart",
    "TaskStarted",
    "TaskStop",
    "TaskView",
]

StoppedBy = Literal["model", "timeout", "session_closed", "shutdown"]
"""Who or what stopped a task: the model (`bg_stop`), its wall clock, its session closing,
the sandbox service shutting down."""
LIVE_STATUSES: frozenset[str] = frozenset({"running", "stopping"})
Label = Annotated[str, msgspec.Meta(max_length=200)]


class TaskStart(Message, frozen=True, kw_only=True, tag="sandbox.task_start"):
    """Start `exec.command` in the background in the session's sandbox, in `cwd` (relative
    to the workspace; empty: the workspace), for `timeout_ms` at most (capped by
    `BASTION_TASKS_MAX_RUN_S`; None: that cap)."""

    exec: ExecRequest
    cwd: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    label: Label = ""
    timeout_ms: Annotated[int, msgspec.Meta(ge=1000, le=MAX_TASK_RUN_MS)] | None = None


class TaskList(Message, frozen=True, kw_only=True, tag="sandbox.task_list"):
    """The session's tasks, newest first."""

    session_id: SessionId
    tenant: Identifier = "default"
    input: BgListInput = BgListInput()


class TaskRead(Message, frozen=True, kw_only=True, tag="sandbox.task_read"):
    """A stretch of one task's output."""

    session_id: SessionId
    tenant: Identifier = "default"
    input: BgOutputInput


class TaskStop(Message, frozen=True, kw_only=True, tag="sandbox.task_stop"):
    """Stop one task of the session."""

    session_id: SessionId
    tenant: Identifier = "default"
    input: BgStopInput


class TaskRecord(Message, frozen=True, kw_only=True, tag="sandbox.task_record"):
    """A task as the tasks bucket keeps it; each change of `status` a compare-and-set.

    `owner` names the sandbox service that runs it (its state dir's marker): the only one
    that may mark it `lost` after a restart. `replica` names the one process of it that
    runs the task (a fresh id each start; empty in a record of before replicas were
    named): a request for the task that lands on another replica is forwarded to it
    (`subjects.sandbox_task_held`)."""

    id: TaskId
    session_id: SessionId
    tenant: Identifier
    owner: Annotated[str, msgspec.Meta(max_length=64)]
    replica: Annotated[str, msgspec.Meta(max_length=64, pattern=r"^[a-z0-9]*$")] = ""
    command: Annotated[str, msgspec.Meta(max_length=8000)]
    label: Label = ""
    status: TaskStatus = "running"
    timeout_ms: int
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    error: Annotated[str, msgspec.Meta(max_length=64)] = ""
    stopped_by: StoppedBy | None = None
    output_bytes: int = 0


class TaskView(Message, frozen=True, kw_only=True, tag="sandbox.task_view"):
    """A task as a tool answers it."""

    id: TaskId
    label: Label
    status: TaskStatus
    command: Annotated[str, msgspec.Meta(max_length=8000)]
    timeout_ms: int
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    error: str = ""
    stopped_by: StoppedBy | None = None
    output_bytes: int = 0
    note: Text = ""
    """What the answer means beyond the fields, when it needs saying (a `bg_stop` whose
    task had not ended yet: it may still run)."""


class TaskStarted(Message, frozen=True, kw_only=True, tag="sandbox.task_started"):
    """`bg_run`'s answer: the task, running, and what to do next."""

    id: TaskId
    label: Label
    status: TaskStatus
    timeout_ms: int
    note: Text


class TaskListing(Message, frozen=True, kw_only=True, tag="sandbox.task_listing"):
    """`bg_list`'s answer."""

    tasks: tuple[TaskView, ...] = ()


class TaskOutput(Message, frozen=True, kw_only=True, tag="sandbox.task_output"):
    """`bg_output`'s answer: `text` from the asked offset, the offset to ask next, and `eof`
    once the task has ended and everything was read."""

    id: TaskId
    status: TaskStatus
    exit_code: int | None = None
    text: Text = ""
    next_offset: int
    eof: bool
    output_truncated: bool = False
    note: Text = ""
    """What the reader should know beyond the fields: that the last characters of a live
    task's output may be held back until it writes more or ends."""
