"""What a session's first (cold) `shell` call costs the bubblewrap backend alone: its warm
sandbox made (bwrap's setup, the init's start and `ready`) and `true` run in it.

It runs in this process, with no bus, no service and no orchestrator: `BwrapBackend.run`
for a new session each time (so each call makes that session's warm sandbox), the session
released after. It prints the median wall time of each and, for the whole run, the CPU
per call of this process (`time.process_time`) and of its children (bwrap, the init and
the command: `resource.getrusage(RUSAGE_CHILDREN)`, counted once each is reaped), then
the same for a raw cold `bwrap … true` as a baseline. On two cores CPU is the figure to
compare: wall time moves with what else runs.

Baseline (2-core machine, as root, cgroup v1): 54 ms wall per cold call, 16 ms CPU of
this process and 33 ms of its children; raw bwrap: 5.4 ms wall, 4.8 ms children's CPU.
Usage: python -m bench.bench_cold [--calls N]   (from the repository root, as root or as a
user bubblewrap runs for)
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

from bastion.shared.sandboxing.bwrap import BwrapBackend
from bastion.shared.sandboxing.spec import SandboxSpec
from bench.common import raw_bwrap_argv, sandbox_workspace


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        took, own, children = anyio.run(cold_calls, Path(tmp), args.calls)
        raw, raw_children = raw_calls(Path(tmp), args.calls)
    print(f"{args.calls} cold calls after 2 warm-up calls; load average {os.getloadavg()[0]:.1f}")
    print(
        f"cold warm-sandbox call: median {statistics.median(took):.1f} ms; CPU per call "
        f"{own:.1f} ms this process, {children:.1f} ms children, {own + children:.1f} ms in all"
    )
    print(
        f"raw cold bwrap true:    median {statistics.median(raw):.1f} ms; CPU per call "
        f"{raw_children:.1f} ms children"
    )


if __name__ == "__main__":
    main()
