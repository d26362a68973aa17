"""Driving a session through a script's steps, stopping when a call waits for a person."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import anyio

from bastion.cli import exits
from bastion.cli.interrupting import Interrupted, cancellable
from bastion.cli.runrecord import RunRecord
from bastion.cli.runs import KeptRun, forget_run, keep_run
from bastion.cli.script import Step
from bastion.cli.transcript import say, show_input, show_result, show_waiting
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalList, ApprovalQuery, ParkedCall
from bastion.proto.errors import ErrorReply
from bastion.proto.hooks import RunMark
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import CallParked, CallResult, ToolCall
from bastion.shared.bus import Client, Requester, request
from bastion.shared.deadlines import call_wait_s
from bastion.shared.errors import BastionError
from bastion.shared.runmarks import mark_run

__all__ = ["CALL_MARGIN_S", "drive", "is_error", "parked_calls", "parked_of"]

CALL_MARGIN_S = 30.0
"""How long a quick request (open, close, list) waits for its answer."""
RETRIES = 2
"""How many times a call that got no answer is sent again (same call_id)."""
RETRY_PAUSE_S = 1.0
"""The pause before sending it again: long enough for `bastion up` to restart a service."""
_NO_ANSWER = frozenset({codes.UNAVAILABLE, codes.TIMEOUT})
_PERSONS = frozenset({codes.WAITING_FOR_APPROVAL, codes.DECLINED})
"""Errors that are a person's to give: a call that waits for one, one a person declined."""


def is_error(result: CallResult) -> bool:
    """Whether a call ended in an error of Bastion's (which makes the run exit 1)."""
    return isinstance(result, ErrorReply) and result.code not in _PERSONS


async def _call(client: Client, session: SessionInfo, step: Step) -> CallResult:
    """The step's call; one that got no answer (its orchestrator died, none answered yet) is
    sent again, with the same call_id, up to `RETRIES` times: the call's record answers
    with the outcome of its one run, or says it is uncertain; it never runs twice. Ctrl-C
    meanwhile cancels it (`interrupting`)."""
    assert step.tool is not None
    call = ToolCall(tool=step.tool, input=step.input, call_id=secrets.token_hex(8))
    assert call.call_id is not None
    return await cancellable(
        client, session.session_id, call.call_id, lambda: _sent(client, session, call)
    )


async def _sent(client: Client, session: SessionInfo, call: ToolCall) -> CallResult:
    """`call`'s answer, sent again as `_call` says when it got none."""
    for attempt in range(RETRIES + 1):
        try:
            result: CallResult = await request(
                client,
                subjects.session_call(session.session_id),
                call,
                CallResult,
                timeout_s=call_wait_s(session, call.tool, call.input),
            )
        except BastionError as error:
            result = error.to_reply()
        unanswered = isinstance(result, ErrorReply) and result.code in _NO_ANSWER
        if not unanswered or attempt == RETRIES:
            break
        await anyio.sleep(RETRY_PAUSE_S)
    return result


async def _stopped(
    client: Client, step: Step, stopped: Interrupted, session: SessionInfo, record: RunRecord
) -> int:
    """Ctrl-C during the step's call: what the call and its cancel answered, said, the run
    ended and the session closed (the rest of the script is not run); 130."""
    if stopped.result is not None:
        say(show_result(stopped.result))
        record.called(step, stopped.result)
    told = stopped.cancel.message if stopped.cancel is not None else "its cancel got no answer"
    sys.stderr.write(f"interrupted: {told}; the rest of the script was not run\n")
    await _end(client, session, "interrupted")
    return exits.INTERRUPTED


async def _end(client: Client, session: SessionInfo, ended: str) -> None:
    """The run marked ended (`ended`), and the session closed."""
    await mark_run(
        client, RunMark(session_id=session.session_id, event="run_end", ended=ended), CALL_MARGIN_S
    )
    await request(
        client,
        subjects.SESSION_CLOSE,
        SessionRef(session_id=session.session_id),
        SessionInfo,
        timeout_s=CALL_MARGIN_S,
    )


async def parked_calls(
    client: Client, session_id: str, *, every_state: bool = False
) -> tuple[ParkedCall, ...]:
    """The session's calls that wait for a person; with `every_state`, answered ones too."""
    query = ApprovalQuery(session_id=session_id, every_state=every_state)
    found = await Requester(client, CALL_MARGIN_S).ask(subjects.APPROVALS_LIST, query, ApprovalList)
    return found.approvals


async def parked_of(client: Client, session_id: str) -> ParkedCall | None:
    """The session's call that waits for a person, if one does."""
    waiting = await parked_calls(client, session_id)
    return waiting[0] if waiting else None


async def _waiting_on(
    client: Client, session: SessionInfo, result: CallResult
) -> ParkedCall | CallParked | None:
    """The call the session waits on: this one, parked, or (refused while the session
    waits) the one parked before it."""
    if isinstance(result, CallParked):
        return result
    if isinstance(result, ErrorReply) and result.code == codes.WAITING_FOR_APPROVAL:
        return await parked_of(client, session.session_id)
    return None


async def drive(
    client: Client,
    session: SessionInfo,
    steps: list[Step],
    state_dir: Path,
    record: RunRecord,
    *,
    failed: bool = False,
) -> int:
    """Make each step's call and print it (and put it in `record`); on a call that waits,
    keep the rest and stop (the session stays open); at the end, close the session.

    The exit status (`bastion.cli.exits`): 1 if a step (or, with `failed`, the call
    answered before) ended in an error of Bastion's — a refusal, an unknown tool, a
    timeout; a command's own non-zero exit and a person's decline are answers — else 3 for
    a run stopped to wait for a person, else 0; 130 for Ctrl-C during a call, which is
    cancelled (`interrupting`), the session closed and the rest of the script not run.
    """
    errors = int(failed)
    for index, step in enumerate(steps):
        if step.say is not None:
            say(f"agent: {step.say}")
            record.said(step.say)
            continue
        say(f"→ {step.tool} {show_input(step.input)}")
        try:
            result = await _call(client, session, step)
        except Interrupted as stopped:
            return await _stopped(client, step, stopped, session, record)
        parked = await _waiting_on(client, session, result)
        if parked is None:
            say(show_result(result))
            record.called(step, result)
            errors += is_error(result)
            continue
        keep_run(
            state_dir,
            KeptRun(
                session_id=session.session_id,
                request_id=parked.request_id,
                steps=tuple(steps[index + 1 :]),
            ),
        )
        show_waiting(parked)
        record.waiting = parked
        return exits.ERROR if errors else exits.WAITING
    await _end(client, session, "done")
    forget_run(state_dir, session.session_id)
    say(f"session {session.session_id}: done")
    if errors:
        sys.stderr.write(
            f"error: {errors} call(s) of session {session.session_id} ended in an error "
            "(the `← error` lines above say why and what to do)\n"
        )
        return exits.ERROR
    return exits.OK
