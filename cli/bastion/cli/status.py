"""`bastion status`: every running service instance, and whether all six are there (exit
status 4, degraded, when one is missing)."""

from __future__ import annotations

import argparse
import sys
import time

import anyio

from bastion.cli import exits
from bastion.cli.common import add_location_options, add_output_option, bus, write_items
from bastion.cli.discovery import Instance, list_instances
from bastion.shared.errors import Unavailable

__all__ = ["SERVICES", "add_parser"]

SERVICES = ("orchestrator", "policy", "sandbox", "egress", "mcp", "vault")


def _missing(instances: list[Instance]) -> list[str]:
    running = {i.name for i in instances}
    return [name for name in SERVICES if name not in running]


def _uptime(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _table(instances: list[Instance]) -> str:
    rows = [("SERVICE", "ID", "HOST", "PID", "VERSION", "UPTIME", "REQUESTS", "ERRORS")]
    rows += [
        (
            i.name, i.id, i.host, i.pid, i.version, _uptime(i.uptime_s()), str(i.requests),
            str(i.errors),
        )
        for i in instances
    ]  # fmt: skip
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


async def _look(args: argparse.Namespace, deadline: float) -> list[Instance]:
    """The instances that answer once all six do or the deadline passed; with a deadline,
    a Bastion still starting (no run record yet, NATS not listening) is waited for too.

    Raises:
        Unavailable: nothing answered by the deadline.
    """
    while True:
        try:
            async with bus(args, "bastion-status") as client:
                while True:
                    instances = await list_instances(client)
                    if not _missing(instances) or time.monotonic() >= deadline:
                        return instances
                    await anyio.sleep(0.3)
        except Unavailable:
            if time.monotonic() >= deadline:
                raise
        await anyio.sleep(0.3)


async def _status(args: argparse.Namespace) -> int:
    instances = await _look(args, time.monotonic() + args.wait)
    missing = _missing(instances)
    if args.output == "json":
        payload = [
            {
                "name": i.name,
                "id": i.id,
                "version": i.version,
                "host": i.host,
                "pid": i.pid,
                "uptime_s": round(i.uptime_s(), 1),
                "requests": i.requests,
                "errors": i.errors,
            }
            for i in instances
        ]
        write_items(payload, missing=missing)
    else:
        sys.stdout.write(_table(instances) + "\n")
        if missing:
            sys.stdout.write(f"missing: {', '.join(missing)}\n")
    return exits.DEGRADED if missing else exits.OK


def run(args: argparse.Namespace) -> int:
    return anyio.run(_status, args)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = commands.add_parser(
        "status",
        help="list every service instance; exit 4 if one of the six services is missing",
    )
    add_location_options(status)
    status.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for all six services to answer",
    )
    add_output_option(status)
    status.set_defaults(handler=run)
