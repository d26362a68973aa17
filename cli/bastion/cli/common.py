"""What every subcommand shares: finding the running system, connecting, reporting errors."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bastion.shared.bus import Client, connect
from bastion.shared.statedir import default_state_dir, find_bus_settings

__all__ = ["add_location_options", "bus", "fail", "session_id", "state_dir_of"]

_SESSION_ID = re.compile("[0-9a-f]{16}")


def session_id(value: str) -> str:
    """A SESSION argument, checked before anything is asked (argparse exits 2 if it is not
    one)."""
    if not _SESSION_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a session id: give the 16 lowercase hex digits `bastion agent "
            "run` printed (`session <id> for agent …`), or find it with `bastion approvals list`"
        )
    return value


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


def fail(message: str, status: int = 1) -> int:
    sys.stderr.write(f"error: {message}\n")
    return status
