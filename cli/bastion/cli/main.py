"""The `bastion` command's entry point: parse the subcommand and run it."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from bastion.cli import (
    agent,
    approvals,
    audit,
    exits,
    hooks,
    mcp,
    natsconfig,
    schema,
    secret,
    skill,
    status,
    token,
    up,
)
from bastion.cli.common import fail
from bastion.shared.errors import BastionError, RemoteError
from bastion.shared.logs import log_level
from bastion.shared.version import VERSION

__all__ = ["main"]


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="bastion",
        description="Bastion: a secure tool-execution plane for AI agents.",
    )
    root.add_argument("--version", action="version", version=f"bastion {VERSION}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up.add_parser(commands)
    status.add_parser(commands)
    agent.add_parser(commands)
    approvals.add_parser(commands)
    schema.add_parser(commands)
    audit.add_parser(commands)
    hooks.add_parser(commands)
    secret.add_parser(commands)
    skill.add_parser(commands)
    mcp.add_parser(commands)
    natsconfig.add_parser(commands)
    token.add_parser(commands)
    return root


def main(argv: list[str] | None = None) -> None:
    # The command speaks in sentences on stderr; library warnings (a NATS reconnect) are
    # noise to a person at a terminal, so only errors of libraries are shown unless
    # BASTION_LOG_LEVEL asks for more.
    try:
        level = log_level("error")
    except BastionError as error:
        sys.exit(fail(error.message, exits.USAGE))
    logging.basicConfig(level=level, format="bastion: %(message)s")
    args = parser().parse_args(argv)
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
