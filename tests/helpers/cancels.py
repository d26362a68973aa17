"""Cancelling a call as a test does it: a call with its own call id, run in the background,
a cancel sent, and waiting for a command's processes to be gone."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from bastion.proto import subjects
from bastion.proto.cancel import CancelAnswer, CancelCall
from bastion.proto.tools import CallResult, ToolCall
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError

__all__ = ["call_with_id", "cancel", "gone", "until"]


async def call_with_id(
    client: Client, session_id: str, call_id: str, tool: str, **tool_input: object
) -> CallResult:
    """One call under `call_id`: a refusal is an answer (an ErrorReply), not an exception."""
    try:
        result: CallResult = await request(
            client,
            subjects.session_call(session_id),
            ToolCall(tool=tool, input=dict(tool_input), call_id=call_id),
            CallResult,
            timeout_s=60,
        )
    except RemoteError as error:
        return error.to_reply()
    return result


async def cancel(client: Client, session_id: str, call_id: str, by: str) -> CancelAnswer:
    """What `session.<id>.cancel` answers for `call_id`."""
    answer: CancelAnswer = await request(
        client,
        subjects.session_cancel(session_id),
        CancelCall(call_id=call_id, by=by),
        CancelAnswer,
        timeout_s=30,
    )
    return answer


async def until(check: Callable[[], bool], what: str, tries: int = 400) -> None:
    """Wait (polling) until `check()` holds; fail naming `what` if it never does."""
    for _ in range(tries):
        if check():
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def gone(pids: Callable[[], list[int]]) -> None:
    """Wait until none of the processes `pids` finds is left."""
    await until(lambda: not pids(), "the cancelled command's processes ended")
