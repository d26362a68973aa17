"""What a call costs through the whole plane, against a baseline measured in the same run.

It starts `bastion up` on a temporary state dir, opens a session, and times:
- `read_file` through agent → orchestrator → policy → sandbox, against reading the same
  file directly in this process;
- `shell true` through the same path, against a raw `bwrap … true` with the same kind of
  sandbox (new namespaces, read-only /usr, the workspace bound, uid 10001);
- `true` in the bubblewrap backend alone (in this process, a session's warm sandbox: no
  bus, policy or orchestrator), against the same raw bwrap.

It prints the session's first `shell` call on its own line (cold: it makes the session's
warm sandbox), then the median and p99 of each measure in milliseconds and the ratio of
the medians, and last the warm `shell true` median against the raw cold bwrap's, and the
CPU time each service spent per `read_file` (from /proc: a figure the machine's load
hardly moves).
Usage: python -m bench.bench_calls [--calls N]   (from the repository root)
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
from bastion.shared.bus import connect, request
from bastion.shared.sandboxing import BwrapBackend, SandboxSpec
from bastion.shared.settings import BusSettings
from bench.common import (
    bastion_up,
    call,
    cpu_ms,
    percentile,
    raw_bwrap_argv,
    sandbox_workspace,
)


async def timed(calls: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    for _ in range(min(5, calls)):
        await one()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await one()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


Rows = list[tuple[str, list[float], list[float]]]


async def measure(
    bus: BusSettings, workspace: Path, calls: int, state_dir: Path
) -> tuple[float, Rows, dict[str, float]]:
    target = workspace / "notes.txt"
    target.write_text("a line of notes\n" * 64)
    argv = raw_bwrap_argv(workspace)

    async def read_directly() -> None:
        target.read_text()

    async def raw_bwrap() -> None:
        await anyio.to_thread.run_sync(lambda: subprocess.run(argv, check=True))

    async with connect(bus, "bench") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(agent="bench", workspace=str(workspace), shell=True, autonomy="L3"),
            SessionInfo,
            timeout_s=30,
        )

        async def read_through_bastion() -> None:
            await call(client, session.session_id, "read_file", path="notes.txt")

        async def shell_through_bastion() -> None:
            await call(client, session.session_id, "shell", command="true")

        started = time.perf_counter()
        await shell_through_bastion()
        first = (time.perf_counter() - started) * 1000
        backend = BwrapBackend(state_dir=workspace.parent / "backend-state")
        spec = SandboxSpec(workspace=workspace, session_id="bench-backend")

        async def backend_alone() -> None:
            await backend.run(spec, "true")

        try:
            alone = await timed(calls, backend_alone)
        finally:
            await backend.aclose()
        before = cpu_ms(state_dir)
        reads = await timed(calls, read_through_bastion)
        after = cpu_ms(state_dir)
        per_read = {name: (after[name] - used) / (calls + 5) for name, used in before.items()}
        return (
            first,
            [
                ("read_file (vs direct read)", reads, await timed(calls, read_directly)),
                (
                    "shell true (vs raw bwrap true)",
                    await timed(calls, shell_through_bastion),
                    await timed(calls, raw_bwrap),
                ),
                ("backend alone: true (vs raw bwrap)", alone, await timed(calls, raw_bwrap)),
            ],
            per_read,
        )


def report(rows: Rows, first: float | None = None) -> None:
    """The table of `rows`; with `first` (the session's first shell call), that call on its
    own line first and the warm shell's ratio to raw cold bwrap last."""
    if first is not None:
        print(f"first shell call of the session (cold, makes its sandbox): {first:.3f} ms")
    columns = ("median ms", "p99 ms", "base median", "base p99", "ratio")
    print(f"{'measure':<32} " + " ".join(f"{c:>11}" for c in columns))
    for name, through, base in rows:
        median, base_median = statistics.median(through), statistics.median(base)
        print(
            f"{name:<32} {median:>11.3f} {percentile(through, 0.99):>11.3f} "
            f"{base_median:>11.3f} {percentile(base, 0.99):>11.3f} {median / base_median:>10.1f}x"
        )
    if first is None:
        return
    _, through, base = rows[1]
    print(
        f"warm shell true median / raw cold bwrap true median: "
        f"{statistics.median(through) / statistics.median(base):.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = sandbox_workspace(Path(tmp) / "work")
        with bastion_up(Path(tmp) / "state") as bus:
            print(f"{args.calls} calls each, after 5 warm-up calls; bastion up on {bus.nats_url}")
            first, rows, per_read = anyio.run(
                measure, bus, workspace, args.calls, Path(tmp) / "state"
            )
            report(rows, first)
            print("CPU ms per read_file: " + ", ".join(f"{k} {v:.2f}" for k, v in per_read.items()))


if __name__ == "__main__":
    main()
