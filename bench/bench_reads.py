"""A session's reads side by side: eight parallel reads of one session against one read.

It starts `bastion up` on a temporary state dir, opens a session, and times, round after
round, one `read_file` on its own and then eight `read_file` of the same session sent at
once (as an MCP client sends them), until every one of the eight has answered, and, for
what the plane itself allows, eight reads of eight sessions at once (no session's turn in
their way). It prints the median and p99 of each in milliseconds and its median over one
read's: one call at a time would make it about 8×; reads side by side aim at ≤ 2×.
Usage: python -m bench.bench_reads [--rounds N] [--parallel N]   (from the repository root)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo
from bastion.shared.bus import Client, connect, request
from bastion.shared.settings import BusSettings
from bench.common import bastion_up, call, percentile, sandbox_workspace


async def timed(rounds: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    for _ in range(min(5, rounds)):
        await one()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await one()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def measure(
    bus: BusSettings, workspace: Path, rounds: int, parallel: int
) -> tuple[list[float], list[float], list[float]]:
    for n in range(parallel):
        (workspace / f"notes{n}.txt").write_text("a line of notes\n" * 64)

    async with connect(bus, "bench") as client:
        sessions = [await opened(client, workspace) for _ in range(parallel)]

        async def read(session_id: str, n: int) -> None:
            await call(client, session_id, "read_file", path=f"notes{n}.txt")

        async def one_read() -> None:
            await read(sessions[0], 0)

        async def reads_at_once() -> None:
            async with anyio.create_task_group() as reads:
                for n in range(parallel):
                    reads.start_soon(read, sessions[0], n)

        async def reads_of_sessions_at_once() -> None:
            async with anyio.create_task_group() as reads:
                for n, session_id in enumerate(sessions):
                    reads.start_soon(read, session_id, n)

        return (
            await timed(rounds, one_read),
            await timed(rounds, reads_at_once),
            await timed(rounds, reads_of_sessions_at_once),
        )


async def opened(client: Client, workspace: Path) -> str:
    session: SessionInfo = await request(
        client,
        subjects.SESSION_OPEN,
        OpenSession(agent="bench", workspace=str(workspace), autonomy="L3"),
        SessionInfo,
        timeout_s=30,
    )
    return session.session_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="timed rounds per measure")
    parser.add_argument("--parallel", type=int, default=8, help="reads sent at once")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = sandbox_workspace(Path(tmp) / "work")
        with bastion_up(Path(tmp) / "state") as bus:
            print(f"{args.rounds} rounds each, after 5 warm-up rounds; bastion up: {bus.nats_url}")
            one, many, apart = anyio.run(measure, bus, workspace, args.rounds, args.parallel)
    rows = (
        ("one read_file", one),
        (f"{args.parallel} read_file of one session at once", many),
        (f"{args.parallel} read_file of {args.parallel} sessions at once", apart),
    )
    print(f"{'measure':<40} {'median ms':>11} {'p99 ms':>11} {'/ one':>7}")
    for name, samples in rows:
        median = statistics.median(samples)
        ratio = median / statistics.median(one)
        print(f"{name:<40} {median:>11.3f} {percentile(samples, 0.99):>11.3f} {ratio:>6.2f}x")


if __name__ == "__main__":
    main()
