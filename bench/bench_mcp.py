"""What an upstream MCP tool call costs through Bastion, against the same call made directly.

It starts `bastion up` on a temporary state dir, adds `bench/noop_server.py` (one read-only
tool that does nothing) as an MCP server run in bubblewrap, opens a session with its tools,
and times `noop_noop` through agent → orchestrator → policy → mcp service → the server,
against `tools/call` of the same tool by the official SDK's client over stdio, connected to
its own copy of the server in this process.

It prints the median and p99 of each in milliseconds and the ratio of the medians, then the
CPU time each service spent per call through the plane (from /proc: a figure the machine's
load hardly moves). With
`--spans` the plane exports its traces to a receiver in this process, and the median of
each span on the call's path is printed too, with how many of each a call made (the
`tools/list` a call makes is started ahead of it, on the orchestrator's prefetch;
`mcp.pin_check` is how long the call still waited for it); tracing slows the plane, so the
timings of such a run are not those of one without. The plane runs with this process's
environment (`BASTION_MCP_PIN_RECHECK_S` included).
Usage: python -m bench.bench_mcp [--calls N] [--spans]   (from the repository root)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo
from bastion.shared.bus import connect, request
from bastion.shared.settings import BusSettings
from bench.bench_calls import report, timed
from bench.common import bastion_up, call, cpu_ms
from tests.helpers.otlp import Receiver, otlp_receiver

SERVER = Path(__file__).with_name("noop_server.py")
PATH = [
    ("process bastion.v1.session.*.call", "orchestrator, the whole call"),
    ("orchestrator.policy", "  its policy decision"),
    ("orchestrator.execute", "  its request to the mcp service"),
    ("process bastion.v1.mcp.call", "    mcp service, the whole call"),
    ("mcp.pin_check", "      its pin check (awaits the listing)"),
    ("MCP send tools/list", "      tools/list (started ahead)"),
    ("MCP send tools/call noop", "      tools/call"),
]

_WITH_PACKAGES = (
    "import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def _passable(path: Path) -> bool:
    return all(each.stat().st_mode & 0o001 for each in (path, *path.parents))


def server_command() -> tuple[list[str], list[str]]:
    """How the server runs in bwrap, and the directories to show it read-only.

    As root a bwrap-sandboxed server runs as nobody (it has no `--dir`), who cannot reach
    a Python under root's home: the system's Python runs it with this venv's packages (the
    same minor version). Where nobody can reach even those, the server runs unsandboxed
    (`--unsandboxed`), and the report says so."""
    if os.geteuid() != 0:
        shown = [sys.prefix, sys.base_prefix, str(SERVER.parent)]
        return [sys.executable, str(SERVER)], [f"--sandbox-read={d}" for d in shown]
    packages = sysconfig.get_paths()["purelib"]
    if not (_passable(Path(packages)) and _passable(SERVER.parent)):
        print("(the server runs unsandboxed: nobody can reach this venv's packages here)")
        return [sys.executable, str(SERVER)], ["--unsandboxed"]
    command = ["/usr/bin/python3", "-I", "-c", _WITH_PACKAGES, packages, str(SERVER)]
    return command, [f"--sandbox-read={packages}", f"--sandbox-read={SERVER.parent}"]


def add_server(state_dir: Path) -> None:
    """`bastion mcp add`, as an operator runs it: the server in bwrap, its packages shown."""
    command, options = server_command()
    subprocess.run(
        [sys.executable, "-m", "bastion.cli", "mcp", "add", "noop", "--state-dir",
         str(state_dir), *options, "--", *command],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


async def measure(
    bus: BusSettings, calls: int, state_dir: Path
) -> tuple[list[tuple[str, list[float], list[float]]], dict[str, float]]:
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

            before = cpu_ms(state_dir)
            through = await timed(calls, through_bastion)
            after = cpu_ms(state_dir)
            per_call = {name: (after[name] - used) / (calls + 5) for name, used in before.items()}
            return [("noop tool (vs SDK direct)", through, await timed(calls, directly))], per_call


def span_report(receiver: Receiver) -> None:
    """The median of each span on the path, and how many of each one call made."""
    durations: dict[str, list[float]] = defaultdict(list)
    for span in receiver.spans:
        durations[span.name].append(span.duration_s * 1000)
    calls = len(durations[PATH[0][0]]) or 1
    print(f"\n{'span (traced run)':<40}{'median ms':>10}{'per call':>10}")
    for name, said in PATH:
        samples = durations[name]
        middle = f"{statistics.median(samples):10.3f}" if samples else f"{'-':>10}"
        print(f"{said:<40}{middle}{len(samples) / calls:>10.2f}")


@contextmanager
def traced() -> Iterator[tuple[Receiver, dict[str, str]]]:
    """A receiver, and the environment of a `bastion up` exporting its traces to it."""
    with otlp_receiver() as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env |= {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        yield receiver, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per measure")
    parser.add_argument("--spans", action="store_true", help="trace the plane: spans on the path")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, traced() if args.spans else nullcontext() as t:
        state_dir = Path(tmp) / "state"
        with bastion_up(state_dir, env=t[1] if t else None) as bus:
            add_server(state_dir)
            print(f"{args.calls} calls each, after 5 warm-up calls; bastion up on {bus.nats_url}")
            rows, per_call = anyio.run(measure, bus, args.calls, state_dir)
            report(rows)
            print("CPU ms per call: " + ", ".join(f"{k} {v:.2f}" for k, v in per_call.items()))
        # `bastion up` has stopped: every service flushed its spans on the way out.
        if t:
            span_report(t[0])


if __name__ == "__main__":
    main()
