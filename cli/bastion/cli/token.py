"""`bastion token create|list|revoke`: agents' bearer tokens for the MCP front door.

A token is printed once, when it is created; the mcp service keeps only its hash, with the
profile every MCP session opened with it gets: the options `bastion agent run` opens a
session with (`bastion.cli.sessionopts`), checked as a session's opening checks them
before the token is minted.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from bastion.cli.common import (
    Asker,
    add_location_options,
    add_output_option,
    add_verbs,
    fail,
    token_id,
    write_items,
    write_json,
)
from bastion.cli.sessionopts import add_session_options, session_fields
from bastion.proto import subjects
from bastion.proto.frontdoor import (
    CreateToken,
    ListTokens,
    RevokeToken,
    TokenCreated,
    TokenList,
    TokenRevoked,
)
from bastion.shared.codec import describe_decode_error
from bastion.shared.errors import InvalidInput

__all__ = ["add_parser"]

TIMEOUT_S = 30.0


_ask = Asker("bastion-token", TIMEOUT_S)


def create(args: argparse.Namespace) -> int:
    try:
        fields = session_fields(args)
    except ValueError as error:
        return fail(str(error), 2)
    try:
        asked = msgspec.convert({"agent": args.agent, **msgspec.to_builtins(fields)}, CreateToken)
    except msgspec.ValidationError as error:
        raise InvalidInput(describe_decode_error(error, CreateToken)) from None
    created = _ask(args, subjects.FRONTDOOR_TOKEN_CREATE, asked, TokenCreated)
    if args.output == "json":
        write_json({"token": created.token, "info": created.info})
        return 0
    sys.stdout.write(
        f"{created.token}\n"
        f"token {created.info.token_id} for agent {created.info.agent} "
        f"(tenant {created.info.tenant}, autonomy {created.info.autonomy}): it is shown only "
        "now, so keep it; send it as `Authorization: Bearer <token>` to the front door's /mcp\n"
    )
    return 0


def list_tokens(args: argparse.Namespace) -> int:
    found = _ask(args, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(tenant=args.tenant), TokenList)
    if args.output == "json":
        write_items(found.tokens)
        return 0
    if not found.tokens:
        sys.stdout.write("no agent tokens\n")
    for info in found.tokens:
        tools = [name for name, on in (("shell", info.shell), ("web", info.web)) if on]
        tools += [f"mcp:{m}" for m in info.mcp]
        sys.stdout.write(
            f"{info.token_id}  {info.agent}  tenant {info.tenant}  {info.autonomy}  "
            f"workspace {info.workspace or '-'}  {','.join(tools) or '-'}  "
            f"created {info.created_at:%Y-%m-%dT%H:%M:%SZ}\n"
        )
    return 0


def revoke(args: argparse.Namespace) -> int:
    asked = RevokeToken(token_id=args.token_id)
    revoked = _ask(args, subjects.FRONTDOOR_TOKEN_REVOKE, asked, TokenRevoked)
    sys.stdout.write(
        f"revoked token {revoked.token_id} of agent {revoked.agent}: requests carrying it are "
        "refused from now on, and its MCP sessions are ended (their calls cancelled, their "
        "background tasks stopped)\n"
    )
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "token", help="agents' bearer tokens for the MCP front door")

    creating = verbs.add_parser("create", help="mint a token for an agent (printed once)")
    creating.add_argument("--agent", required=True, help="the agent's name, e.g. claude-code")
    add_session_options(creating)
    creating.set_defaults(handler=create)

    listing = verbs.add_parser("list", help="the live tokens (ids and agents, never the token)")
    listing.add_argument("--tenant", default=None, help="only this tenant's")
    listing.set_defaults(handler=list_tokens)

    revoking = verbs.add_parser("revoke", help="refuse a token from now on and end its sessions")
    revoking.add_argument(
        "token_id", type=token_id, help="the token's id, from `bastion token list`"
    )
    revoking.set_defaults(handler=revoke)

    for verb in (creating, listing):
        add_output_option(verb)
    for verb in (creating, listing, revoking):
        add_location_options(verb)
