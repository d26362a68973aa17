"""`bastion mcp`: a tenant's upstream MCP servers (add, review, list, remove, browse).

`bastion mcp resources list|read` and `bastion mcp prompts list` show what a server offers.

A server is added by the command that starts it (`bastion mcp add notes --dir notes --
python3 notes_server.py`) or by its URL (`--url`); the mcp service starts or reaches it,
lists its tools with what each call is taken to do, and pins them. A session gets a
server's tools with `--mcp NAME`, each named `<server>_<tool>`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, get_args

import msgspec

from bastion.cli.common import (
    Asker,
    add_location_options,
    add_output_option,
    add_repeatable,
    add_verbs,
    write_items,
    write_json,
)
from bastion.cli.mcpsign import add_sign_commands
from bastion.proto import subjects
from bastion.proto.mcp import (
    AddServer,
    BrowseServer,
    BrowseText,
    EffectOverride,
    ListServers,
    McpReview,
    McpServerSpec,
    RemoveServer,
    ReviewServer,
    SamplingAllowance,
    ServerList,
    ServerRemoved,
)
from bastion.proto.policy import Effect
from bastion.shared.codec import describe_decode_error
from bastion.shared.errors import InvalidInput

__all__ = ["add_parser", "review_lines"]

TIMEOUT_S = 120.0
"""A server is started (or reached) and listed within this; a slow first start may need it."""


_send = Asker("bastion-mcp", TIMEOUT_S)


def _effects(given: list[str]) -> tuple[EffectOverride, ...]:
    overrides = []
    for item in given:
        tool, _, effect = item.partition("=")
        if not tool or effect not in get_args(Effect):
            raise InvalidInput(
                f"--effect {item!r} is not TOOL=EFFECT with EFFECT read, write, external or spend"
            )
        overrides.append(EffectOverride(tool=tool, effect=effect))  # type: ignore[arg-type]
    return tuple(overrides)


def _public_key(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(f"cannot read the public key {path}: {error}") from None


def _spec(args: argparse.Namespace) -> McpServerSpec:
    command = [part for part in args.command if part != "--"]
    if command and "/" in command[0]:
        # The program is found from here; its arguments are its own (a relative path in
        # them is taken from its directory, --dir, where it runs).
        command[0] = str(Path(command[0]).absolute())
    if not command and not args.url:
        raise InvalidInput(
            f"give the command that starts the server (`bastion mcp add {args.name} -- "
            "COMMAND`), or its --url"
        )
    if command and args.url:
        raise InvalidInput("give the command that starts the server or its --url, not both")
    if args.unsandboxed and args.sandbox:
        raise InvalidInput("--unsandboxed and --sandbox contradict each other: give one")
    fields: dict[str, Any] = {
        "transport": "http" if args.url else "stdio",
        "command": tuple(command),
        "directory": str(Path(args.dir).resolve()) if args.dir else None,
        "env": tuple(args.env),
        "sandbox": "none" if args.unsandboxed else (args.sandbox or "bwrap"),
        "sandbox_network": args.sandbox_network,
        "url": args.url,
        "headers": tuple(args.header),
        "public_key_pem": _public_key(args.public_key),
        "timeout_s": args.timeout,
        "effects": _effects(args.effect),
        "sampling": (
            SamplingAllowance(max_tokens=args.max_tokens, per_session=args.per_session)
            if args.sampling
            else None
        ),
        "read_only_dirs": tuple(str(Path(d).resolve()) for d in args.sandbox_read),
    }
    try:
        return msgspec.convert(fields, McpServerSpec)
    except msgspec.ValidationError as error:
        raise InvalidInput(describe_decode_error(error, McpServerSpec)) from None


def review_lines(review: McpReview, *, after_add: bool) -> list[str]:
    """A review as the operator reads it: the server, then one line per tool."""
    head = (
        f"MCP server {review.server} ({review.server_name} {review.server_version}, "
        f"protocol {review.protocol})"
    )
    lines = [head + (": reviewed tools" if after_add else ":")]
    for tool in review.tools:
        effect = tool.effect + (", repeats run again" if tool.repeats_run_again else "")
        status = "" if after_add else f" [{tool.status}]"
        lines.append(f"{tool.name} ({effect}): {tool.description}{status}")
        lines.extend(f"  ! {flag}" for flag in tool.flags)
    lines.append(f"Runs: {review.runs}.")
    if after_add:
        lines.append(f"Give it to a session with --mcp {review.server}.")
    elif review.pinned:
        lines.append("Pinned as listed.")
    elif all(t.status == "unchanged" for t in review.tools):
        lines.append("Every tool is as it was pinned.")
    else:
        lines.append("Add --accept to pin the tools as listed.")
    return lines


def _after_name(args: argparse.Namespace) -> argparse.Namespace:
    """`add`'s options given after the server's name, merged over those given before it.

    argparse gives everything after the first positional to a REMAINDER argument, so NAME
    and what follows it are parsed again by a parser of the same options.
    """
    if not args.rest:
        raise InvalidInput("give the server's name: `bastion mcp add NAME -- COMMAND`")
    again = argparse.ArgumentParser(prog="bastion mcp add NAME", add_help=False)
    _add_options(again)
    again.add_argument("command", nargs=argparse.REMAINDER)
    again.add_argument("--tenant")
    add_location_options(again)
    later = again.parse_args(args.rest[1:])
    merged = vars(args) | {"name": args.rest[0], "command": []}
    for key, value in vars(later).items():
        if isinstance(value, list) and key != "command":
            merged[key] = merged.get(key, []) + value
        elif value not in (None, [], again.get_default(key)):
            merged[key] = value
    return argparse.Namespace(**merged)


def _checked_name(name: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,31}", name):
        raise InvalidInput(
            f"{name[:40]!r} is not a server's name: lowercase letters, digits and hyphens, "
            "starting with a letter, at most 32 (its tools are NAME_TOOL)"
        )
    return name


def add(args: argparse.Namespace) -> int:
    args = _after_name(args)
    ask = AddServer(tenant=args.tenant, name=_checked_name(args.name), spec=_spec(args))
    review: McpReview = _send(args, subjects.MCP_ADD, ask, McpReview)
    sys.stdout.write("\n".join(review_lines(review, after_add=True)) + "\n")
    return 0


def review(args: argparse.Namespace) -> int:
    ask = ReviewServer(tenant=args.tenant, name=_checked_name(args.name), accept=args.accept)
    found: McpReview = _send(args, subjects.MCP_REVIEW, ask, McpReview)
    if args.output == "json":
        write_json(found)
    else:
        sys.stdout.write("\n".join(review_lines(found, after_add=False)) + "\n")
    return 0


def list_servers(args: argparse.Namespace) -> int:
    found: ServerList = _send(args, subjects.MCP_LIST, ListServers(tenant=args.tenant), ServerList)
    if args.output == "json":
        write_items(found.servers, tenant=found.tenant)
        return 0
    if not found.servers:
        sys.stdout.write(
            f"tenant {found.tenant} has no MCP servers: add one with `bastion mcp add`\n"
        )
    for server in found.servers:
        sys.stdout.write(f"{server.name}: {server.runs}\n")
        for pin in sorted(server.pins, key=lambda p: p.name):
            sys.stdout.write(f"  {pin.name} ({pin.effect})\n")
    return 0


def remove(args: argparse.Namespace) -> int:
    ask = RemoveServer(tenant=args.tenant, name=_checked_name(args.name))
    removed: ServerRemoved = _send(args, subjects.MCP_REMOVE, ask, ServerRemoved)
    sys.stdout.write(f"removed MCP server {removed.name} and its pins\n")
    return 0


def browse(args: argparse.Namespace) -> int:
    ask = BrowseServer(
        tenant=args.tenant,
        name=_checked_name(args.name),
        what=args.what,
        uri=getattr(args, "uri", ""),
    )
    found: BrowseText = _send(args, subjects.MCP_BROWSE, ask, BrowseText)
    if args.output == "json":
        write_json(found)
    else:
        sys.stdout.write(found.text.rstrip("\n") + "\n")
    return 0


def _add_options(adding: argparse.ArgumentParser) -> None:
    adding.add_argument("--dir", help="where the server works (at /workspace in its sandbox)")
    add_repeatable(
        adding,
        "--env",
        "NAME",
        "give it this variable (from the vault, else the mcp service's environment)",
    )
    adding.add_argument(
        "--sandbox", metavar="BACKEND", help="bwrap (the default) or docker:IMAGE@sha256:DIGEST"
    )
    adding.add_argument(
        "--unsandboxed", action="store_true",
        help="run it outside any sandbox, as the mcp service (only for a server you trust)",
    )  # fmt: skip
    adding.add_argument("--sandbox-network", default="none", metavar="NETWORK")
    add_repeatable(
        adding,
        "--sandbox-read",
        "DIR",
        "show a host directory read-only in its sandbox (e.g. its virtual environment)",
    )
    adding.add_argument("--url", help="a server over HTTP, instead of a command")
    add_repeatable(
        adding,
        "--header",
        "'NAME: VALUE'",
        "add a header to every request; ${VAR} is the vault secret VAR",
    )
    adding.add_argument(
        "--public-key", type=Path, metavar="FILE",
        help="its tools must be signed with this ECDSA P-256 key (PEM)",
    )  # fmt: skip
    adding.add_argument(
        "--timeout", type=float, default=60.0,
        help="seconds a call may take before it counts as unanswered (default 60)",
    )  # fmt: skip
    add_repeatable(
        adding,
        "--effect",
        "TOOL=EFFECT",
        "what a call of TOOL is taken to do: read, write, external or spend",
    )
    adding.add_argument(
        "--sampling", action="store_true", help="allow its sampling requests (off by default)"
    )
    adding.add_argument("--max-tokens", type=int, default=1000, help="per completion (1000)")
    adding.add_argument("--per-session", type=int, default=5, help="completions a session (5)")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "mcp", help="upstream MCP servers: add, review, list, remove")

    adding = verbs.add_parser("add", help="start or reach a server, review its tools, pin them")
    _add_options(adding)
    adding.add_argument(
        "rest", nargs=argparse.REMAINDER, metavar="NAME [OPTIONS] -- COMMAND",
        help="its name (its tools are NAME_TOOL), then the command that starts it",
    )  # fmt: skip
    adding.set_defaults(handler=add)

    reviewing = verbs.add_parser("review", help="what changed since the review; --accept pins")
    reviewing.add_argument("name")
    reviewing.add_argument("--accept", action="store_true", help="pin the tools as listed")
    reviewing.set_defaults(handler=review)

    listing = verbs.add_parser("list", help="the tenant's servers and their pinned tools")
    listing.set_defaults(handler=list_servers)

    removing = verbs.add_parser("remove", help="forget a server and its pins")
    removing.add_argument("name")
    removing.set_defaults(handler=remove)

    resources = verbs.add_parser("resources", help="what a server offers: list, read")
    resource_verbs = resources.add_subparsers(dest="action", required=True)
    resource_list = resource_verbs.add_parser("list", help="the resources a server offers")
    resource_list.add_argument("name")
    resource_list.set_defaults(handler=browse, what="resources")
    resource_read = resource_verbs.add_parser("read", help="read one of a server's resources")
    resource_read.add_argument("name")
    resource_read.add_argument("uri", metavar="URI", help="the resource's URI, as listed")
    resource_read.set_defaults(handler=browse, what="read")

    prompts = verbs.add_parser("prompts", help="a server's prompts: list")
    prompt_verbs = prompts.add_subparsers(dest="action", required=True)
    prompt_list = prompt_verbs.add_parser("list", help="the prompts a server offers")
    prompt_list.add_argument("name")
    prompt_list.set_defaults(handler=browse, what="prompts")

    reading = (reviewing, listing, resource_list, resource_read, prompt_list)
    for verb in (adding, removing, *reading):
        verb.add_argument("--tenant", default="default", help="whose server (default: default)")
        add_location_options(verb)
    for verb in reading:
        add_output_option(verb)
    add_sign_commands(verbs)
