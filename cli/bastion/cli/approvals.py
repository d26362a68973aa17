"""`bastion approvals list|approve|decline`: the calls that wait for a person, and answers.

`approve` and `decline` answer one call by its request id (`list` shows them), wherever
it came from (a script's run, the HTTP API, an MCP client); the rest of a script
`bastion agent run` kept for its session runs with `bastion agent continue`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable

import anyio

from bastion.cli import exits
from bastion.cli.common import (
    add_documented,
    add_location_options,
    add_output_option,
    bus,
    fail,
    request_id,
    state_dir_of,
    write_items,
    write_json,
)
from bastion.cli.driving import CALL_MARGIN_S, is_error
from bastion.cli.resume import add_always_option, answer_line, send_answer, session_of
from bastion.cli.runs import kept_run
from bastion.cli.transcript import show_input, show_result
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalList, ApprovalQuery, ParkedCall
from bastion.shared.bus import Client, request

__all__ = ["add_parser"]

Handler = Callable[[argparse.Namespace], int]


async def _found(client: Client, query: ApprovalQuery) -> ApprovalList:
    found: ApprovalList = await request(
        client, subjects.APPROVALS_LIST, query, ApprovalList, timeout_s=CALL_MARGIN_S
    )
    return found


async def _list(args: argparse.Namespace) -> int:
    async with bus(args, "bastion-approvals") as client:
        found = await _found(
            client, ApprovalQuery(session_id=args.session, tenant=args.tenant, every_state=args.all)
        )
    if args.output == "json":
        write_items(found.approvals)
        return exits.OK
    if not found.approvals:
        sys.stdout.write("nothing waits for a person\n")
        return exits.OK
    for parked in found.approvals:
        sys.stdout.write(
            f"{parked.request_id}  session {parked.session_id}  {parked.state}  "
            f"{parked.created_at:%Y-%m-%d %H:%M:%S}Z\n"
            f"  {parked.tool} {show_input(parked.input)[:200]}\n"
            f"  why: {parked.decision.reason}\n"
        )
    return exits.OK


def _pending(found: ApprovalList, request_id: str) -> ParkedCall | None:
    return next(
        (a for a in found.approvals if a.request_id == request_id and a.state == "pending"), None
    )


async def _answer(args: argparse.Namespace) -> int:
    async with bus(args, "bastion-approvals") as client:
        parked = _pending(await _found(client, ApprovalQuery()), args.request_id)
        if parked is None:
            return fail(
                f"no call waits under request {args.request_id}: it was answered already, or "
                "the id is not one (`bastion approvals list --all` shows them)"
            )
        session = await session_of(client, parked.session_id)
        answered = await send_answer(
            client, session, parked, always=getattr(args, "always", None), decline=args.why
        )
    if args.output == "json":
        write_json(answered)
    else:
        sys.stdout.write(answer_line(answered) + "\n" + show_result(answered.result) + "\n")
        kept = kept_run(state_dir_of(args), parked.session_id)
        if kept is not None and kept.request_id == parked.request_id:
            sys.stdout.write(
                f"session {parked.session_id} keeps the rest of its script: `bastion agent "
                f"continue {parked.session_id} --approve` runs it (the answer above stands)\n"
            )
    return exits.ERROR if is_error(answered.result) else exits.OK


def _sync(handler: Callable[[argparse.Namespace], Awaitable[int]]) -> Handler:
    def run(args: argparse.Namespace) -> int:
        return anyio.run(handler, args)

    return run


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    approvals = add_documented(
        commands, "approvals", "calls that wait for a person: list, approve, decline", __doc__ or ""
    )
    verbs = approvals.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="the parked calls (pending ones, unless --all)")
    listing.add_argument("--session", metavar="ID", help="only this session's")
    listing.add_argument("--tenant", help="only this tenant's")
    listing.add_argument("--all", action="store_true", help="answered ones too")
    listing.set_defaults(handler=_sync(_list))
    approving = verbs.add_parser("approve", help="run a waiting call (once, or --always)")
    approving.add_argument("request_id", metavar="ID", type=request_id, help="its request id")
    add_always_option(approving)
    approving.set_defaults(handler=_sync(_answer), why=None)
    declining = verbs.add_parser("decline", help="refuse a waiting call, saying why")
    declining.add_argument("request_id", metavar="ID", type=request_id, help="its request id")
    declining.add_argument("why", metavar="WHY", help="why not: the agent is told")
    declining.set_defaults(handler=_sync(_answer))
    for verb in (listing, approving, declining):
        add_output_option(verb)
        add_location_options(verb)
