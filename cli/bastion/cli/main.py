"""The `bastion` command's entry point: parse the subcommand and run it.

Only the module of the command asked for is imported (a command's module brings the bus,
the MCP SDK or the services' code with it, seconds of imports together): `bastion
--version` imports none, `bastion status` only its own; `bastion --help`, an unknown
command and the tests' `parser()` import them all.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Final

from bastion.cli import exits
from bastion.cli.exits import fail
from bastion.shared.errors import BastionError, RemoteError
from bastion.shared.logs import log_level
from bastion.shared.version import VERSION

__all__ = ["COMMANDS", "main", "parser"]

COMMANDS: Final = {
    "up": "up",
    "status": "status",
    "agent": "agent",
    "approvals": "approvals",
    "proto": "schema",
    "audit": "audit",
    "hooks": "hooks",
    "secret": "secret",
    "skill": "skill",
    "mcp": "mcp",
    "nats": "natsconfig",
    "token": "token",
}
"""Each command and the module of `bastion.cli` that adds it, in the order `bastion --help`
lists them."""


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with every command, or with `command` only ("" for none:
    `--version`)."""
    root = argparse.ArgumentParser(
        prog="bastion",
        description="Bastion: a secure tool-execution plane for AI agents.",
    )
    root.add_argument("--version", action="version", version=f"bastion {VERSION}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(f"bastion.cli.{module}").add_parser(commands)
    return root


def _command_of(argv: list[str]) -> str | None:
    """The one command `argv` needs parsed, "" for none, None when every one is needed."""
    if argv[:1] == ["--version"]:
        return ""
    return argv[0] if argv and argv[0] in COMMANDS else None


def main(argv: list[str] | None = None) -> None:
    # The command speaks in sentences on stderr; library warnings (a NATS reconnect) are
    # noise to a person at a terminal, so only errors of libraries are shown unless
    # BASTION_LOG_LEVEL asks for more.
    try:
        level = log_level("error")
    except BastionError as error:
        sys.exit(fail(error.message, exits.USAGE))
    logging.basicConfig(level=level, format="bastion: %(message)s")
    given = sys.argv[1:] if argv is None else argv
    args = parser(_command_of(given)).parse_args(given)
    try:
        status_code: int = args.handler(args)
    except BastionError as error:
        status_code = fail(str(error) if isinstance(error, RemoteError) else error.message)
    except KeyboardInterrupt:
        status_code = exits.INTERRUPTED
    except BrokenPipeError:
        status_code = _reader_left()
    sys.exit(status_code)


def _reader_left() -> int:
    """Whoever read the output (`| head`) stopped reading: nothing is left to say to it.

    Standard output is pointed at /dev/null, so the interpreter's last flush at exit has
    nowhere to fail; the status is a pipe's (128 + SIGPIPE), as a shell tool's would be.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return exits.READER_LEFT
