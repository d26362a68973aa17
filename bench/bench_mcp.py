"""What an upstream MCP tool call costs through Bastion, against the same call made directly.

It starts `bastion up` on a temporary state dir, adds `bench/noop_server.py` (one read-only
tool that does nothing) as an MCP server run in bubblewrap, opens a session with its tools,
and times `noop_noop` through agent → orchestrator → policy → mcp service → the server,
against `tools/call` of the same tool by the official SDK's client over stdio, connected to
its own copy of the server in this process.

It prints the median and p99 of each in milliseconds and the ratio of the medians.
Usage: python -m bench.bench_mcp [--calls N]   (from the repository root)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo
from bastion.shared.bus import connect, request
from bastion.shared.settings import BusSettings
from bench.bench_calls import report, timed
from bench.common import bastion_up, call

SERVER = Path(__file__).with_name("noop_server.py")


def add_server(state_dir: Path) -> None:
    """`bastion mcp add`, as an operator runs it: the server in bwrap, its venv shown."""
    subprocess.run(
        [sys.executable, "-m", "bastion.cli", "mcp", "add", "noop", "--state-dir",
         str(state_dir), "--sandbox-read", sys.prefix, "--sandbox-read", sys.base_prefix,
         "--sandbox-read", str(SERVER.parent),
         "--", sys.executable, str(SERVER)],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


async def measure(bus: BusSettings, calls: int) -> list[tuple[str, list[float], list[float]]]:
    async with connect(bus, "bench") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(agent="bench", autonomy="L3", mcp=("noop",)),
            SessionInfo,
            timeout_s=60,
        )
        if not any(t.name == "noop_noop" for t in session.tools):
            raise SystemExit(f"noop_noop was not offered: {'; '.join(session.notices)}")

        async def through_bastion() -> None:
            await call(client, session.session_id, "noop_noop")

        direct = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
        async with Client(direct) as sdk:

            async def directly() -> None:
                await sdk.session.call_tool("noop", {})

            return [
                (
                    "noop tool (vs SDK direct)",
                    await timed(calls, through_bastion),
                    await timed(calls, directly),
                )
            ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp) / "state"
        with bastion_up(state_dir) as bus:
            add_server(state_dir)
            print(f"{args.calls} calls each, after 5 warm-up calls; bastion up on {bus.nats_url}")
            report(anyio.run(measure, bus, args.calls))


if __name__ == "__main__":
    main()
