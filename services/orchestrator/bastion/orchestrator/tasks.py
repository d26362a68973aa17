"""The background-task tools as the orchestrator runs them — `bg_run`, `bg_list`,
`bg_output`, `bg_stop` — each a request to the sandbox service, its answer shown to the
model as JSON (docs/tools.md, "Background tasks")."""

from __future__ import annotations

import msgspec

from bastion.orchestrator.execute import in_sandbox
from bastion.orchestrator.toolcall import Call
from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest
from bastion.proto.tasks import (
    TaskList,
    TaskListing,
    TaskOutput,
    TaskRead,
    TaskStart,
    TaskStarted,
    TaskStop,
    TaskView,
)
from bastion.proto.toolinput import BgListInput, BgOutputInput, BgRunInput, BgStopInput

__all__ = ["list_tasks", "read_task", "start_task", "stop_task"]


def _shown(answer: msgspec.Struct) -> str:
    """The answer as the model reads it: its fields as JSON, without the wire's tag."""
    fields = msgspec.to_builtins(answer)
    fields.pop("kind", None)
    if isinstance(answer, TaskListing):
        for task in fields["tasks"]:
            task.pop("kind", None)
    return msgspec.json.encode(fields).decode()


async def start_task(call: Call, given: BgRunInput) -> str:
    """`bg_run`: the command started in the background in the session's sandbox."""
    request = TaskStart(
        exec=ExecRequest(
            command=given.command,
            call_id=call.call_id,
            **in_sandbox(call, call.session.limits),
        ),
        cwd=given.cwd or "",
        label=given.label or "",
        timeout_ms=given.timeout_ms,
    )
    return _shown(await call.ask(subjects.SANDBOX_TASK_START, request, TaskStarted))


async def list_tasks(call: Call, given: BgListInput) -> str:
    """`bg_list`: the session's tasks, newest first."""
    request = TaskList(**call.whose(), input=given)
    return _shown(await call.ask(subjects.SANDBOX_TASK_LIST, request, TaskListing))


async def read_task(call: Call, given: BgOutputInput) -> str:
    """`bg_output`: a stretch of a task's output, and where to read on."""
    request = TaskRead(**call.whose(), input=given)
    return _shown(await call.ask(subjects.SANDBOX_TASK_OUTPUT, request, TaskOutput))


async def stop_task(call: Call, given: BgStopInput) -> str:
    """`bg_stop`: the task as it is once stopped."""
    request = TaskStop(**call.whose(), input=given)
    return _shown(await call.ask(subjects.SANDBOX_TASK_STOP, request, TaskView))
