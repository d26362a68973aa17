"""`bastion approvals list`: the calls that wait for a person."""

from __future__ import annotations

import argparse
import json
import sys

import anyio
import msgspec

from bastion.cli.common import add_location_options, bus
from bastion.cli.transcript import show_input
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalList, ApprovalQuery
from bastion.shared.bus import request

__all__ = ["add_parser"]


async def _list(args: argparse.Namespace) -> int:
    async with bus(args, "bastion-approvals") as client:
        found: ApprovalList = await request(
            client,
            subjects.APPROVALS_LIST,
            ApprovalQuery(session_id=args.session, tenant=args.tenant, every_state=args.all),
            ApprovalList,
            timeout_s=30,
        )
    if args.output == "json":
        payload = msgspec.to_builtins(found.approvals)
        sys.stdout.write(json.dumps({"approvals": payload}, indent=2) + "\n")
        return 0
    if not found.approvals:
        sys.stdout.write("nothing waits for a person\n")
        return 0
    for parked in found.approvals:
        sys.stdout.write(
            f"{parked.request_id}  session {parked.session_id}  {parked.state}  "
            f"{parked.created_at:%Y-%m-%d %H:%M:%S}Z\n"
            f"  {parked.tool} {show_input(parked.input)[:200]}\n"
            f"  why: {parked.decision.reason}\n"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    return anyio.run(_list, args)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    approvals = commands.add_parser("approvals", help="calls that wait for a person")
    verbs = approvals.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="the parked calls (pending ones, unless --all)")
    listing.add_argument("--session", metavar="ID", help="only this session's")
    listing.add_argument("--tenant", help="only this tenant's")
    listing.add_argument("--all", action="store_true", help="answered ones too")
    listing.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_location_options(listing)
    listing.set_defaults(handler=run)
