"""Ctrl-C while `bastion agent run` waits for a call: the call is cancelled where it runs.

The first SIGINT sends `session.<id>.cancel` for the call (by `cli:<user>`) and waits a
little for the call's answer, which says it was cancelled; the run then stops with status
130. A second SIGINT exits at once.
"""

from __future__ import annotations

import getpass
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Final

import anyio

from bastion.cli import exits
from bastion.proto import subjects
from bastion.proto.cancel import CancelAnswer, CancelCall
from bastion.proto.tools import CallResult
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError

__all__ = ["ANSWER_WAIT_S", "Interrupted", "cancellable", "canceller"]

ANSWER_WAIT_S: Final = 15.0
"""How long, after Ctrl-C, the run waits for the cancel's and the call's answers."""


class Interrupted(Exception):
    """Ctrl-C stopped the run during a call: what the call answered, if it did in time."""

    def __init__(self, result: CallResult | None, cancel: CancelAnswer | None) -> None:
        super().__init__("interrupted")
        self.result = result
        self.cancel = cancel


def canceller() -> str:
    """Who cancels: `cli:<the user running the command>`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return "cli:" + (re.sub(r"\s+", "_", user)[:150] or str(os.getuid()))


def _exit_now(_signal: int, _frame: object) -> None:
    sys.stdout.flush()
    sys.stderr.write("interrupted again: exiting without waiting\n")
    sys.stderr.flush()
    os._exit(exits.INTERRUPTED)


async def _cancel(client: Client, session_id: str, call_id: str) -> CancelAnswer | None:
    try:
        answer: CancelAnswer = await request(
            client,
            subjects.session_cancel(session_id),
            CancelCall(call_id=call_id, by=canceller()),
            CancelAnswer,
            timeout_s=ANSWER_WAIT_S,
        )
    except BastionError as error:
        sys.stderr.write(f"the cancel of call {call_id} failed: {error.message}\n")
        return None
    return answer


async def cancellable(
    client: Client, session_id: str, call_id: str, make: Callable[[], Awaitable[CallResult]]
) -> CallResult:
    """`make()`'s result; on Ctrl-C meanwhile, the call is cancelled.

    Raises:
        Interrupted: Ctrl-C came; it carries the call's answer if it came in time.
    """
    result: CallResult | None = None
    done = anyio.Event()

    async def run() -> None:
        nonlocal result
        result = await make()
        done.set()

    before = signal.getsignal(signal.SIGINT)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            if not await _interrupted(done):
                assert result is not None
                return result
            signal.signal(signal.SIGINT, _exit_now)
            sys.stderr.write(f"interrupted: cancelling call {call_id}…\n")
            sys.stderr.flush()
            cancel = await _cancel(client, session_id, call_id)
            with anyio.move_on_after(ANSWER_WAIT_S):
                await done.wait()
            group.cancel_scope.cancel()
    finally:
        signal.signal(signal.SIGINT, before)
    raise Interrupted(result, cancel)


async def _interrupted(done: anyio.Event) -> bool:
    """Whether SIGINT came before `done` was set."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async with anyio.create_task_group() as waiting:

            async def finished() -> None:
                await done.wait()
                waiting.cancel_scope.cancel()

            waiting.start_soon(finished)
            async for _ in signals:
                waiting.cancel_scope.cancel()
                return True
    return False
