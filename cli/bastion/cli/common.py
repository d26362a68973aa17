"""What every subcommand shares: finding the running system, connecting, the `-o` output
option and its JSON, reporting errors."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio
import msgspec

from bastion.cli.exits import fail
from bastion.shared.bus import Client, connect, request
from bastion.shared.statedir import default_state_dir, find_bus_settings

__all__ = [
    "Asker",
    "add_documented",
    "add_location_options",
    "add_output_option",
    "add_repeatable",
    "add_verbs",
    "bus",
    "fail",
    "request_id",
    "session_id",
    "state_dir_of",
    "write_items",
    "write_json",
]

OUTPUTS = ("table", "json")

T = TypeVar("T")

_HEX_ID = re.compile("[0-9a-f]{16}")


def session_id(value: str) -> str:
    """A SESSION argument, checked before anything is asked (argparse exits 2 if it is not
    one)."""
    if not _HEX_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a session id: give the 16 lowercase hex digits `bastion agent "
            "run` printed (`session <id> for agent …`), or find it with `bastion approvals list`"
        )
    return value


def request_id(value: str) -> str:
    """A parked call's request id argument, checked as `session_id` is."""
    if not _HEX_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a request id: give the 16 lowercase hex digits `bastion "
            "approvals list` shows first on a call's line"
        )
    return value


def token_id(value: str) -> str:
    """An agent token's id argument, checked as `session_id` is."""
    if not _HEX_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value[:40]!r} is not a token id (16 hex digits): `bastion token list` shows them"
        )
    return value


def add_documented(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, doc: str
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` shows `doc` (its module's docstring) as it is written."""
    return commands.add_parser(
        name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_verbs(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], noun: str, help: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """A command named for what it acts on, and its verbs: `bastion <noun> <verb>`."""
    return commands.add_parser(noun, help=help).add_subparsers(dest="verb", required=True)


def add_repeatable(parser: argparse.ArgumentParser, flag: str, metavar: str, help: str) -> None:
    """A flag that may be given again and again: its values in order, `[]` when not given."""
    parser.add_argument(flag, action="append", default=[], metavar=metavar, help=help)


def add_location_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="Bastion's state directory (BASTION_STATE_DIR; default ~/.local/state/bastion)",
    )
    parser.add_argument(
        "--nats",
        metavar="URL",
        default=None,
        help="the NATS URL of a running Bastion (BASTION_NATS_URL; default: the state dir's)",
    )


def state_dir_of(args: argparse.Namespace) -> Path:
    given: Path | None = args.state_dir
    return given.expanduser().resolve() if given else default_state_dir()


@asynccontextmanager
async def bus(args: argparse.Namespace, name: str) -> AsyncIterator[Client]:
    """A connection, as the operator, to the Bastion that `--nats` / `--state-dir` point at."""
    async with connect(find_bus_settings(args.nats, state_dir_of(args)), name) as client:
        yield client


class Asker:
    """One request, as the operator, to the Bastion `args` point at, and its answer: for a
    command that sends one message and prints what comes back. One per command group,
    with the name its connections carry and how long an answer may take."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s

    def __call__(
        self, args: argparse.Namespace, subject: str, message: object, answer: type[T]
    ) -> T:
        async def go() -> T:
            async with bus(args, self.name) as client:
                found: T = await request(client, subject, message, answer, timeout_s=self.timeout_s)
                return found

        return anyio.run(go)


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """`-o table|json`, the same on every command that lists, shows or reads."""
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="table",
        help="table (the default: lines for a person) or json (one object; a list's entries "
        "are its `items`)",
    )


def write_json(payload: object) -> None:
    """One JSON object on standard output (structs, datetimes and tuples as JSON has them)."""
    sys.stdout.write(json.dumps(msgspec.to_builtins(payload), indent=2) + "\n")


def write_items(items: Iterable[object], **context: object) -> None:
    """A list as every command gives it with `-o json`: `{"items": [...]}`, beside what the
    list is of (`tenant`, `missing`)."""
    write_json({**context, "items": list(items)})
