"""The background-task tools as the orchestrator runs them — `bg_run`, `bg_list`,
`bg_output`, `bg_stop` — each a request to the sandbox service, its answer shown to the
model as JSON (docs/tools.md, "Background tasks").

`bg_run` and `bg_stop` are sent again when their answer does not come in time, for
`BASTION_TASKS_ASK_S`: the sandbox makes a start once per call id (sent again, it answers
with the task the first sending started) and a stop joins the one under way, so asking again
does nothing twice, and the model is told what happened rather than that nobody knows
(docs/architecture.md §5)."""

from __future__ import annotations

import logging
from typing import TypeVar

import anyio
import msgspec

from bastion.orchestrator.execute import in_sandbox
from bastion.orchestrator.toolcall import Call
from bastion.proto import errors as codes
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
from bastion.shared.errors import BastionError, Timeout

__all__ = ["TaskUnanswered", "list_tasks", "read_task", "start_task", "stop_task"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class TaskUnanswered(BastionError):
    """The sandbox service never answered a task's start or stop, however often asked."""

    code = codes.UNCERTAIN


async def _asked_until_answered(
    call: Call, subject: str, message: msgspec.Struct, reply: type[T], unanswered: str
) -> T:
    """The answer to a request that is safe to send again, sent again each time its deadline
    passes without one, for `call.ask_again_s`.

    Raises:
        TaskUnanswered: none came; its message starts with `unanswered`.
    """
    given_up = anyio.current_time() + call.ask_again_s
    asks = 0
    while True:
        asks += 1
        try:
            return await call.ask(subject, message, reply)
        except Timeout as error:
            if anyio.current_time() >= given_up:
                raise TaskUnanswered(
                    f"{unanswered} (asked {asks} times, {error.message})"
                ) from None
            logger.info(
                "a background task's request got no answer in time: asked again",
                extra={"session": call.session.session_id, "call_id": call.call_id},
            )


def _shown(answer: msgspec.Struct) -> str:
    """The answer as the model reads it: its fields as JSON, without the wire's tag."""
    fields = msgspec.to_builtins(answer)
    fields.pop("kind", None)
    if not fields.get("note", True):
        del fields["note"]
    if isinstance(answer, TaskListing):
        for task in fields["tasks"]:
            task.pop("kind", None)
            if not task["note"]:
                del task["note"]
    return msgspec.json.encode(fields).decode()


async def start_task(call: Call, given: BgRunInput) -> str:
    """`bg_run`: the command started in the background in the session's sandbox; asked
    again with the same call id until answered (the task is started once)."""
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
    started = await _asked_until_answered(
        call,
        subjects.SANDBOX_TASK_START,
        request,
        TaskStarted,
        "the sandbox service did not answer this bg_run: the task may have started (bg_list "
        "lists it if it did, and nothing starts it again)",
    )
    return _shown(started)


async def list_tasks(call: Call, given: BgListInput) -> str:
    """`bg_list`: the session's tasks, newest first."""
    request = TaskList(**call.whose(), input=given)
    return _shown(await call.ask(subjects.SANDBOX_TASK_LIST, request, TaskListing))


async def read_task(call: Call, given: BgOutputInput) -> str:
    """`bg_output`: a stretch of a task's output, and where to read on."""
    request = TaskRead(**call.whose(), input=given)
    return _shown(await call.ask(subjects.SANDBOX_TASK_OUTPUT, request, TaskOutput))


async def stop_task(call: Call, given: BgStopInput) -> str:
    """`bg_stop`: the task as it is once stopped (or, when it has not ended in time, as it
    is, saying it may still run); asked again until answered (a stop joins the one under
    way)."""
    request = TaskStop(**call.whose(), input=given)
    stopped = await _asked_until_answered(
        call,
        subjects.SANDBOX_TASK_STOP,
        request,
        TaskView,
        "the sandbox service did not answer this bg_stop: the task may still run (a stop "
        "that reached the sandbox service goes on until every process of it is gone; "
        "bg_list shows its status, and bg_stop may be called again)",
    )
    return _shown(stopped)
