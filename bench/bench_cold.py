"""What a session's first (cold) `shell` call costs the bubblewrap backend alone: its warm
sandbox made (bwrap's setup, the init's start and `ready`) and `true` run in it.

It runs in this process, with no bus, no service and no orchestrator: `BwrapBackend.run`
for a new session each time (so each call makes that session's warm sandbox), the session
released after. It prints the median wall time of each and, for the whole run, the CPU
per call of this process (`time.process_time`) and of its children (bwrap, the init and
the command: `resource.getrusage(RUSAGE_CHILDREN)`, counted once each is reaped), then
the same for a raw cold `bwrap … true` as a baseline. On two cores CPU is the figure to
compare: wall time moves with what else runs.

With `--plane` it also starts `bastion up` and times each of `--calls` sessions' first
`shell true` through the whole plane (agent → orchestrator → policy → sandbox), each session
closed after, and prints the sandbox service's CPU per session: its own and its reaped
children's (bwrap, the init, the command), read from /proc once the last session closed.

Baseline (this 2-core machine, as root, cgroup v1, load 3-6 from other runs): before the
init's cuts, 51-57 ms of CPU per cold call (5-6 ms this process, 46-51 ms its children),
median 60-116 ms; after, 27-34 ms (4-6 and 23-28), median 30-77 ms; a raw cold bwrap
3.3 ms of CPU. Through the plane (`--plane`): the sandbox service's CPU per session 77-94 ms
before, 53-57 ms after; the first call's median 126-237 ms before, 44-86 ms after.
Usage: python -m bench.bench_cold [--calls N] [--plane]   (from the repository root, as root
or as a user bubblewrap runs for)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import anyio

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.shared.bus import connect, request
from bastion.shared.sandboxing.bwrap import BwrapBackend
from bastion.shared.sandboxing.spec import SandboxSpec
from bastion.shared.statedir import read_run_record
from bench.common import bastion_up, call, raw_bwrap_argv, sandbox_workspace

_SETTLE_S = 2.0
"""How long the last closed session's sandbox may take to be closed and reaped."""


def _children_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def cold_calls(root: Path, calls: int) -> tuple[list[float], float, float]:
    """Wall time (ms) of each cold call, and CPU ms per call of this process and children."""
    workspace = sandbox_workspace(root / "work")
    backend = BwrapBackend(state_dir=root / "state")
    took: list[float] = []
    try:
        for number in range(calls + 2):
            if number == 2:
                own, children = time.process_time(), _children_s()
            spec = SandboxSpec(workspace=workspace, session_id=f"{number:016x}")
            started = time.perf_counter()
            result = await backend.run(spec, "true")
            if number >= 2:
                took.append((time.perf_counter() - started) * 1000)
            if result.exit_status != 0:
                raise SystemExit(f"`true` failed in the sandbox: {result.stderr}")
            assert backend.warm is not None
            if await backend.warm.release(spec.session_id) != 1:
                raise SystemExit("the call did not run in a warm sandbox")
        own = (time.process_time() - own) * 1000 / calls
        children = (_children_s() - children) * 1000 / calls
    finally:
        await backend.aclose()
    return took, own, children


def _sandbox_cpu_ms(state_dir: Path) -> float:
    """The sandbox service's CPU so far, its own and its reaped children's, from /proc."""
    record = read_run_record(state_dir)
    if record is None or "sandbox" not in record.children:
        raise SystemExit("bastion up has no sandbox service running")
    fields = Path(f"/proc/{record.children['sandbox']}/stat").read_text().rsplit(")", 1)[1]
    ticks = sum(int(value) for value in fields.split()[11:15])
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


async def plane_calls(root: Path, calls: int) -> tuple[list[float], float]:
    """Wall time (ms) of each session's first `shell true` through the plane, and the
    sandbox service's CPU ms per session (its own and its children's)."""
    workspace = sandbox_workspace(root / "plane-work")
    took: list[float] = []
    with bastion_up(root / "plane-state") as bus:
        async with connect(bus, "bench") as client:
            for number in range(calls + 2):
                if number == 2:
                    used = _sandbox_cpu_ms(root / "plane-state")
                opened = OpenSession(
                    agent="bench", workspace=str(workspace), shell=True, autonomy="L3"
                )
                session = await request(
                    client, subjects.SESSION_OPEN, opened, SessionInfo, timeout_s=30
                )
                started = time.perf_counter()
                await call(client, session.session_id, "shell", command="true")
                if number >= 2:
                    took.append((time.perf_counter() - started) * 1000)
                ref = SessionRef(session_id=session.session_id)
                await request(client, subjects.SESSION_CLOSE, ref, SessionInfo, timeout_s=30)
            await anyio.sleep(_SETTLE_S)
            used = _sandbox_cpu_ms(root / "plane-state") - used
    return took, used / calls


def raw_calls(root: Path, calls: int) -> tuple[list[float], float]:
    """Wall time (ms) of each raw cold `bwrap … true`, and its CPU ms per call."""
    argv = raw_bwrap_argv(sandbox_workspace(root / "work"))
    took = []
    children = _children_s()
    for _ in range(calls):
        started = time.perf_counter()
        subprocess.run(argv, check=True)
        took.append((time.perf_counter() - started) * 1000)
    return took, (_children_s() - children) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="timed calls")
    parser.add_argument("--plane", action="store_true", help="also through `bastion up`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        took, own, children = anyio.run(cold_calls, Path(tmp), args.calls)
        raw, raw_children = raw_calls(Path(tmp), args.calls)
        plane = anyio.run(plane_calls, Path(tmp), args.calls) if args.plane else None
    print(f"{args.calls} cold calls after 2 warm-up calls; load average {os.getloadavg()[0]:.1f}")
    print(
        f"cold warm-sandbox call: median {statistics.median(took):.1f} ms; CPU per call "
        f"{own:.1f} ms this process, {children:.1f} ms children, {own + children:.1f} ms in all"
    )
    print(
        f"raw cold bwrap true:    median {statistics.median(raw):.1f} ms; CPU per call "
        f"{raw_children:.1f} ms children"
    )
    if plane is not None:
        through, sandbox = plane
        print(
            f"first shell true of a session through the plane: median "
            f"{statistics.median(through):.1f} ms; the sandbox service's CPU per session "
            f"(its own and its children's) {sandbox:.1f} ms"
        )


if __name__ == "__main__":
    main()
