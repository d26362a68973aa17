"""Many sessions running commands at once, against as many raw bwrap spawns at once.

It starts `bastion up`, opens `--sessions` sessions (spread over `--tenants` tenants, so
the per-tenant cap on concurrent sandboxes is exercised as it would be in a cluster), and
has every session run `--rounds` shell commands concurrently with all the others. The
baseline is the same number of raw `bwrap … true` spawns, run with the same concurrency in
the same run. It prints the median and p99 latency of one command, the wall time of the
whole batch, commands per second, and the ratios.
Usage: python -m bench.bench_sessions [--sessions 50] [--rounds 4] [--tenants 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo
from bastion.shared.bus import Client, connect, request
from bastion.shared.settings import BusSettings
from bench.common import bastion_up, call, percentile, raw_bwrap_argv, sandbox_workspace


async def batch(
    sessions: int, rounds: int, one: Callable[[int], Awaitable[None]]
) -> tuple[list[float], float]:
    """Run `one(index)` `rounds` times in each of `sessions` concurrent lanes."""
    latencies: list[float] = []

    async def lane(index: int) -> None:
        for _ in range(rounds):
            started = time.perf_counter()
            await one(index)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(sessions):
            tg.start_soon(lane, index)
    return latencies, time.perf_counter() - started


async def measure(
    bus: BusSettings, root: Path, sessions: int, rounds: int, tenants: int
) -> tuple[tuple[list[float], float], tuple[list[float], float]]:
    workspaces = [root / f"work{n}" for n in range(sessions)]
    for workspace in workspaces:
        sandbox_workspace(workspace)
    limiter = anyio.CapacityLimiter(sessions)

    async def raw(index: int) -> None:
        argv = raw_bwrap_argv(workspaces[index])
        await anyio.to_thread.run_sync(lambda: subprocess.run(argv, check=True), limiter=limiter)

    async with connect(bus, "bench") as client:
        ids = [
            await open_session(client, workspaces[n], f"tenant{n % tenants}")
            for n in range(sessions)
        ]

        async def through_bastion(index: int) -> None:
            await call(client, ids[index], "shell", command="echo hello from $HOME")

        await batch(sessions, 1, through_bastion)  # warm up
        plane = await batch(sessions, rounds, through_bastion)
    baseline = await batch(sessions, rounds, raw)
    return plane, baseline


async def open_session(client: Client, workspace: Path, tenant: str) -> str:
    session: SessionInfo = await request(
        client,
        subjects.SESSION_OPEN,
        OpenSession(
            agent="bench", tenant=tenant, workspace=str(workspace), shell=True, autonomy="L3"
        ),
        SessionInfo,
        timeout_s=60,
    )
    return session.session_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tenants", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, bastion_up(Path(tmp) / "state") as bus:
        (plane, plane_wall), (base, base_wall) = anyio.run(
            measure, bus, Path(tmp), args.sessions, args.rounds, args.tenants
        )
    total = args.sessions * args.rounds
    print(
        f"{args.sessions} sessions over {args.tenants} tenants, {args.rounds} commands each "
        f"({total} in all), all sessions at once"
    )
    print(f"{'':<28} {'median ms':>10} {'p99 ms':>10} {'batch s':>9} {'cmds/s':>8}")
    for name, samples, wall in (
        ("shell through bastion", plane, plane_wall),
        ("raw bwrap true", base, base_wall),
    ):
        print(
            f"{name:<28} {statistics.median(samples):>10.1f} {percentile(samples, 0.99):>10.1f} "
            f"{wall:>9.2f} {total / wall:>8.1f}"
        )
    print(
        f"ratio (bastion / raw): median {statistics.median(plane) / statistics.median(base):.1f}x, "
        f"batch {plane_wall / base_wall:.1f}x"
    )


if __name__ == "__main__":
    main()
