"""Load: many concurrent sessions through `bastion up`, each service's memory, and fairness.

It starts `bastion up` (`--replicas N` instances of each service), opens `--sessions`
sessions over `--tenants` tenants, and has them all make `--calls` calls at once, in turn
`read_file`, `write_file` (a new file each time) and `shell` (`echo`). It prints the
throughput, the p50 and p99 latency of all calls and of each tool, the CPU time each
service spent per call (from /proc: a figure the machine's load hardly moves), and the
resident memory (now and at its
peak) of every service instance, read from /proc for the pids in `bastion up`'s run
record. Then fairness: with `--tenant-rate` calls per second per tenant, a greedy tenant's
`--greedy` sessions call as fast as they can while a modest tenant calls within its rate
for `--fair-s` seconds; it prints what each got done and how often each was refused
(`rate_limited`).
Usage: python -m bench.bench_load [--sessions 100] [--calls 6] [--replicas 1] [--tenants 10]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import anyio

from bastion.cli.natsserver import free_port
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.session import OpenSession, SessionInfo
from bastion.proto.tools import CallResult, ToolCall
from bastion.shared.bus import Client, connect, request
from bastion.shared.errors import BastionError
from bastion.shared.settings import BusSettings
from bastion.shared.statedir import read_run_record
from bench.common import bastion_up, cpu_ms, percentile, sandbox_workspace

TOOLS = ("read_file", "write_file", "shell")


def tool_input(tool: str, session: int, call: int) -> dict[str, object]:
    if tool == "read_file":
        return {"path": "seed.txt"}
    if tool == "write_file":
        return {"path": f"out{call}.txt", "content": f"session {session} call {call}\n"}
    return {"command": f"echo {session} {call}"}


async def one_call(
    client: Client, session_id: str, tool: str, given: dict[str, object]
) -> CallResult:
    try:
        result: CallResult = await request(
            client, subjects.session_call(session_id), ToolCall(tool=tool, input=given),
            CallResult, timeout_s=300,
        )  # fmt: skip
    except BastionError as error:
        return error.to_reply()
    return result


async def open_session(client: Client, workspace: Path, tenant: str) -> str:
    ask = OpenSession(
        agent="bench", tenant=tenant, workspace=str(workspace), shell=True, autonomy="L3"
    )
    session: SessionInfo = await request(
        client, subjects.SESSION_OPEN, ask, SessionInfo, timeout_s=60
    )
    return session.session_id


def workspaces(root: Path, count: int, prefix: str) -> list[Path]:
    made = [root / f"{prefix}{n}" for n in range(count)]
    for workspace in made:
        workspace.mkdir()
        (workspace / "seed.txt").write_text("seed\n")
        sandbox_workspace(workspace)
    return made


async def load(
    client: Client, paths: list[Path], tenants: int, calls: int
) -> tuple[dict[str, list[float]], Counter[str], float]:
    """Every session's calls at once: latencies (ms) per tool, refusals by code, wall time."""
    ids = [await open_session(client, path, f"tenant{n % tenants}") for n, path in enumerate(paths)]
    latencies: dict[str, list[float]] = defaultdict(list)
    refused: Counter[str] = Counter()

    async def lane(n: int) -> None:
        for c in range(calls):
            tool = TOOLS[(n + c) % len(TOOLS)]
            started = time.perf_counter()
            result = await one_call(client, ids[n], tool, tool_input(tool, n, c))
            if isinstance(result, ErrorReply):
                refused[result.code] += 1
            else:
                latencies[tool].append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    async with anyio.create_task_group() as lanes:
        for n in range(len(ids)):
            lanes.start_soon(lane, n)
    return latencies, refused, time.perf_counter() - started


async def fairness(
    client: Client, greedy_paths: list[Path], modest_path: Path, rate: float, seconds: float
) -> dict[str, Counter[str]]:
    """A greedy tenant's sessions flat out beside a modest tenant within its rate."""
    greedy = [await open_session(client, path, "greedy") for path in greedy_paths]
    modest = await open_session(client, modest_path, "modest")
    counts: dict[str, Counter[str]] = {"greedy": Counter(), "modest": Counter()}
    deadline = time.monotonic() + seconds

    async def hammer(session_id: str) -> None:
        while time.monotonic() < deadline:
            result = await one_call(client, session_id, "read_file", {"path": "seed.txt"})
            counts["greedy"][result.code if isinstance(result, ErrorReply) else "ok"] += 1

    async def modestly() -> None:
        while time.monotonic() < deadline:
            result = await one_call(client, modest, "read_file", {"path": "seed.txt"})
            counts["modest"][result.code if isinstance(result, ErrorReply) else "ok"] += 1
            await anyio.sleep(1 / (rate / 2))  # half its quota

    async with anyio.create_task_group() as tenants:
        for session_id in greedy:
            tenants.start_soon(hammer, session_id)
        tenants.start_soon(modestly)
    return counts


def memory(state_dir: Path) -> list[tuple[str, int, int]]:
    """(instance, RSS KiB, peak RSS KiB) of every child in the run record."""
    record = read_run_record(state_dir)
    rows = []
    for name, pid in sorted((record.children if record else {}).items()):
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        rss = int(fields["VmRSS"].split()[0])
        peak = int(fields["VmHWM"].split()[0])
        rows.append((name, rss, peak))
    return rows


async def measure(
    bus: BusSettings, state_dir: Path, root: Path, args: argparse.Namespace
) -> tuple[
    tuple[dict[str, list[float]], Counter[str], float],
    list[tuple[str, int, int]],
    dict[str, Counter[str]],
    dict[str, float],
]:
    async with connect(bus, "bench") as client:
        paths = workspaces(root, args.sessions, "work")
        before = cpu_ms(state_dir)
        measured = await load(client, paths, args.tenants, args.calls)
        after = cpu_ms(state_dir)
        made = args.sessions * args.calls
        per_call = {name: (after[name] - used) / made for name, used in before.items()}
        rows = memory(state_dir)
        fair = await fairness(
            client, workspaces(root, args.greedy, "greedy"),
            workspaces(root, 1, "modest")[0], args.tenant_rate, args.fair_s,
        )  # fmt: skip
    return measured, rows, fair, per_call


def report(
    args: argparse.Namespace,
    measured: tuple[dict[str, list[float]], Counter[str], float],
    rows: list[tuple[str, int, int]],
    fair: dict[str, Counter[str]],
    per_call: dict[str, float],
) -> None:
    latencies, refused, wall = measured
    total = sum(len(v) for v in latencies.values()) + sum(refused.values())
    print(
        f"{args.sessions} sessions over {args.tenants} tenants at once, {args.calls} calls each "
        f"({total} in all), {args.replicas} instance(s) of each service"
    )
    print(f"throughput: {total / wall:.1f} calls/s ({wall:.2f} s); refused: {dict(refused) or 0}")
    print(f"{'tool':<12} {'calls':>6} {'p50 ms':>9} {'p99 ms':>9}")
    every = [ms for samples in latencies.values() for ms in samples]
    if every:
        print(
            f"{'all':<12} {len(every):>6} {percentile(every, 0.5):>9.1f} "
            f"{percentile(every, 0.99):>9.1f}"
        )
    for tool in TOOLS:
        samples = latencies[tool]
        if samples:
            print(
                f"{tool:<12} {len(samples):>6} {percentile(samples, 0.5):>9.1f} "
                f"{percentile(samples, 0.99):>9.1f}"
            )
    print(f"{'instance':<16} {'RSS MiB':>8} {'peak MiB':>9}")
    for name, rss, peak in rows:
        print(f"{name:<16} {rss / 1024:>8.1f} {peak / 1024:>9.1f}")
    print(f"{'all':<16} {sum(r[1] for r in rows) / 1024:>8.1f}")
    print("CPU ms per call (opening the sessions included): " + ", ".join(
        f"{name} {ms:.2f}" for name, ms in per_call.items()
    ))  # fmt: skip
    print(
        f"fairness ({args.fair_s:g} s, {args.tenant_rate:g} calls/s per tenant): "
        f"greedy tenant ({args.greedy} sessions flat out) {fair['greedy']['ok']} done, "
        f"{fair['greedy']['rate_limited']} rate_limited; modest tenant (half its rate) "
        f"{fair['modest']['ok']} done, {fair['modest']['rate_limited']} rate_limited"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--tenant-rate", type=float, default=20.0)
    parser.add_argument("--greedy", type=int, default=20)
    parser.add_argument("--fair-s", type=float, default=5.0)
    args = parser.parse_args()
    # The rate is per tenant for the whole plane, counted across replicas in KV;
    # the load phase's tenants stay well under it.
    env = dict(os.environ) | {"BASTION_TENANT_CALLS_PER_S": f"{args.tenant_rate:g}"}
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp) / "state"
        flags = ("--replicas", str(args.replicas), "--http-port", str(free_port()))
        with bastion_up(state_dir, *flags, env=env) as bus:
            measured, rows, fair, per_call = anyio.run(measure, bus, state_dir, Path(tmp), args)
    report(args, measured, rows, fair, per_call)


if __name__ == "__main__":
    main()
