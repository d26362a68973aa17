"""`bastion agent continue SESSION`: answer the call a session waits on, then run the rest.

The rest of the script is the one `bastion agent run` kept in `<state dir>/runs/`; with
none kept, only the answer is given and the session stays open. A call a person already
answered elsewhere (the HTTP API, `bastion approvals`) is shown with that answer, and the
rest of the script runs on. It exits as `agent run` does: 1 if a step ended in an error
of Bastion's, 3 if a call waits for a person again.
"""

from __future__ import annotations

import argparse
import getpass

import anyio

from bastion.cli import exits
from bastion.cli.common import (
    add_documented,
    add_location_options,
    add_output_option,
    bus,
    fail,
    session_id,
    state_dir_of,
)
from bastion.cli.driving import CALL_MARGIN_S, drive, is_error, parked_calls, parked_of
from bastion.cli.runrecord import RunRecord, recorded
from bastion.cli.runs import KeptRun, kept_run
from bastion.cli.transcript import say, show_input, show_result
from bastion.proto import subjects
from bastion.proto.approvals import (
    ApprovalAnswer,
    ApprovalAnswered,
    ParkedCall,
)
from bastion.proto.session import SessionInfo, SessionRef
from bastion.shared.bus import Client, Requester, request
from bastion.shared.deadlines import call_wait_s

__all__ = [
    "add_always_option",
    "add_continue_parser",
    "answer_line",
    "send_answer",
    "session_of",
]


def answer_line(answered: ApprovalAnswered) -> str:
    """The answered call's `→` line, saying who answered and how."""
    parked = answered.approval
    head = f"→ {parked.tool} {show_input(parked.input)}"
    if parked.state == "declined":
        return f"{head} (declined by {parked.answered_by}: {parked.answer})"
    always = f"; from now on: {parked.rule}" if parked.rule else ""
    return f"{head} (approved by {parked.answered_by}{always})"


async def session_of(client: Client, session_id: str) -> SessionInfo:
    """The session as the orchestrator keeps it (its limits bound how long a call waits)."""
    return await Requester(client, CALL_MARGIN_S).ask(
        subjects.SESSION_GET, SessionRef(session_id=session_id), SessionInfo
    )


async def send_answer(
    client: Client,
    session: SessionInfo,
    parked: ParkedCall,
    *,
    always: str | None,
    decline: str | None,
) -> ApprovalAnswered:
    """Answer a parked call as the person at this terminal: approve it (with `always`, a
    rule too; `""` is exactly this call) unless `decline` says why not. The answer comes
    once an approved call has run."""
    answered: ApprovalAnswered = await request(
        client,
        subjects.APPROVALS_ANSWER,
        ApprovalAnswer(
            request_id=parked.request_id,
            approve=decline is None,
            by=f"cli:{getpass.getuser()}",
            always=always is not None,
            rule=always or "",
            reason=decline or "",
        ),
        ApprovalAnswered,
        timeout_s=call_wait_s(session, parked.tool, parked.input),
    )
    return answered


async def _answered_elsewhere(
    client: Client, args: argparse.Namespace, kept: KeptRun | None
) -> ParkedCall | None:
    """The kept run's waiting call, if a person already answered it elsewhere (the HTTP
    API, `bastion approvals`, another terminal)."""
    if kept is None:
        return None
    every = await parked_calls(client, args.session, every_state=True)
    return next(
        (a for a in every if a.request_id == kept.request_id and a.state != "pending"),
        None,
    )


async def _continue(args: argparse.Namespace, record: RunRecord) -> int:
    async with bus(args, "bastion-agent") as client:
        session = await session_of(client, args.session)
        record.session_id = session.session_id
        kept = kept_run(state_dir_of(args), args.session)
        parked = await parked_of(client, args.session)
        if parked is None:
            elsewhere = await _answered_elsewhere(client, args, kept)
            if kept is None or elsewhere is None:
                return fail(
                    f"session {args.session} waits for no answer: nothing to approve or decline "
                    "(`bastion approvals list` shows what waits)"
                )
            who = elsewhere.answered_by or "someone"
            say(
                f"→ {elsewhere.tool} {show_input(elsewhere.input)} (already answered by {who}: "
                f"{elsewhere.state}; this answer changes nothing)"
            )
            failed = elsewhere.result is not None and is_error(elsewhere.result)
            if elsewhere.result is not None:
                say(show_result(elsewhere.result))
            record.answered(elsewhere, elsewhere.result)
            return await drive(
                client, session, list(kept.steps), state_dir_of(args), record, failed=failed
            )
        answered = await send_answer(
            client, session, parked, always=args.always, decline=args.decline
        )
        say(answer_line(answered))
        say(show_result(answered.result))
        record.answered(answered.approval, answered.result)
        if kept is None or kept.request_id != parked.request_id:
            say(f"session {args.session}: no script was kept for it, so it stays open")
            return 0
        return await drive(
            client,
            session,
            list(kept.steps),
            state_dir_of(args),
            record,
            failed=is_error(answered.result),
        )


def run_continue(args: argparse.Namespace) -> int:
    if args.always is not None and args.decline is not None:
        return fail("--always goes with --approve, not with --decline", exits.USAGE)
    return recorded(args.output, lambda record: anyio.run(_continue, args, record))


def add_always_option(parser: argparse.ArgumentParser, lead: str = "") -> None:
    """`--always [RULE]`, as `agent continue --approve` and `approvals approve` take it."""
    parser.add_argument(
        "--always",
        nargs="?",
        const="",
        default=None,
        metavar="RULE",
        help=f"{lead}also let calls RULE covers run this session (default: exactly this "
        "call), e.g. 'write_file(notes:*)'",
    )


def add_continue_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_documented(
        verbs,
        "continue",
        "answer the call a session waits on, then run the rest of its script",
        __doc__ or "",
    )
    parser.add_argument("session", metavar="SESSION", type=session_id, help="the session's id")
    answer = parser.add_mutually_exclusive_group(required=True)
    answer.add_argument("--approve", action="store_true", help="run the call (once)")
    answer.add_argument("--decline", metavar="WHY", help="refuse the call, saying why")
    add_always_option(parser, "with --approve: ")
    add_output_option(parser)
    add_location_options(parser)
    parser.set_defaults(handler=run_continue)
