"""The `bastion` command's entry point: parse the subcommand and run it."""

from __future__ import annotations

import argparse
import sys

from bastion.cli import agent, schema, status, up
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
    schema.add_parser(commands)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        status_code: int = args.handler(args)
    except KeyboardInterrupt:
        status_code = 130
    sys.exit(status_code)
