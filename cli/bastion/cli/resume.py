"""`bastion agent continue SESSION`: answer the call a session waits on, then run the rest.

The rest of the script is the one `bastion agent run` kept in `<state dir>/runs/`; with
none kept, only the answer is given and the session stays open.
"""

from __future__ import annotations

import argparse
import getpass

import anyio

from bastion.cli.common import add_location_options, bus, fail, state_dir_of
from bastion.cli.driving import CALL_MARGIN_S, drive, parked_of
from bastion.cli.runs import kept_run
from bastion.cli.transcript import say, show_input, show_result
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalAnswer, ApprovalAnswered
from bastion.proto.session import SessionInfo, SessionRef
from bastion.shared.bus import request
from bastion.shared.deadlines import call_wait_s

__all__ = ["add_continue_parser", "answer_line"]


def answer_line(answered: ApprovalAnswered) -> str:
    """The answered call's `→` line, saying who answered and how."""
    parked = answered.approval
    head = f"→ {parked.tool} {show_input(parked.input)}"
    if parked.state == "declined":
        return f"{head} (declined by {parked.answered_by}: {parked.answer})"
    always = f"; from now on: {parked.rule}" if parked.rule else ""
    return f"{head} (approved by {parked.answered_by}{always})"


async def _continue(args: argparse.Namespace) -> int:
    async with bus(args, "bastion-agent") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_GET,
            SessionRef(session_id=args.session),
            SessionInfo,
            timeout_s=CALL_MARGIN_S,
        )
        parked = await parked_of(client, args.session)
        if parked is None:
            return fail(
                f"session {args.session} waits for no answer: nothing to approve or decline "
                "(`bastion approvals list` shows what waits)"
            )
        answered: ApprovalAnswered = await request(
            client,
            subjects.APPROVALS_ANSWER,
            ApprovalAnswer(
                request_id=parked.request_id,
                approve=args.decline is None,
                by=f"cli:{getpass.getuser()}",
                always=args.always is not None,
                rule=args.always or "",
                reason=args.decline or "",
            ),
            ApprovalAnswered,
            timeout_s=call_wait_s(session, parked.tool, parked.input),
        )
        say(answer_line(answered))
        say(show_result(answered.result))
        kept = kept_run(state_dir_of(args), args.session)
        if kept is None or kept.request_id != parked.request_id:
            say(f"session {args.session}: no script was kept for it, so it stays open")
            return 0
        return await drive(client, session, list(kept.steps), state_dir_of(args))


def run_continue(args: argparse.Namespace) -> int:
    if args.always is not None and args.decline is not None:
        return fail("--always goes with --approve, not with --decline", 2)
    return anyio.run(_continue, args)


def add_continue_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "continue",
        help="answer the call a session waits on, then run the rest of its script",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("session", metavar="SESSION", help="the session's id")
    answer = parser.add_mutually_exclusive_group(required=True)
    answer.add_argument("--approve", action="store_true", help="run the call (once)")
    answer.add_argument("--decline", metavar="WHY", help="refuse the call, saying why")
    parser.add_argument(
        "--always",
        nargs="?",
        const="",
        default=None,
        metavar="RULE",
        help="with --approve: also let calls RULE covers run this session (default: "
        "exactly this call), e.g. 'write_file(notes:*)'",
    )
    add_location_options(parser)
    parser.set_defaults(handler=run_continue)
