"""Where a warm `shell true` spends its time in the sandbox service, step by step.

It starts a nats-server, serves the sandbox service in this process on it, and sends
`sandbox.exec` requests for `true` over NATS (no orchestrator or policy in front: what is
left is the sandbox service's own part, request in to answer out). Each step is timed by
wrapping the function that does it here, in the benchmark only (the code measured is
unchanged): the workspace check, the workspace's size bound, taking and giving back the
tenant's slot, the command's cgroup made and removed, the git protection's plan and sweep,
the init's run of the command (request sent to exit status back), the backend's whole run
and the handler's. It prints the median of each in milliseconds, then the request over
NATS against a raw cold `bwrap … true` timed in the same run, and the load average.
Usage: python -m bench.bench_shell [--calls N]   (from the repository root, as root or as a
user bubblewrap runs for)
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

import bastion.sandbox.service as service_module
from bastion.cli.natsserver import running_nats_server
from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, ExecResult
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.sharedslots import SharedSlots
from bastion.sandbox.workspace import CheckedWorkspaces
from bastion.shared.bus import connect, request
from bastion.shared.sandboxing.bwrap import BwrapBackend
from bastion.shared.sandboxing.cgroup import CommandCgroup
from bastion.shared.sandboxing.gitguard import GitGuard
from bastion.shared.sandboxing.warm import WarmSandbox
from bench.common import percentile, raw_bwrap_argv, sandbox_workspace

SESSION = "0123456789abcdef"
steps: dict[str, list[int]] = {}


def _kept(name: str, took: int) -> None:
    steps.setdefault(name, []).append(took)


def timed(owner: Any, attribute: str, name: str) -> None:
    """Time each call of `owner.attribute` (a function or a coroutine function) as `name`."""
    original = getattr(owner, attribute)

    if inspect.iscoroutinefunction(original):

        async def waited(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return await original(*args, **kwargs)
            finally:
                _kept(name, time.perf_counter_ns() - started)

        setattr(owner, attribute, waited)
        return

    def called(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter_ns()
        try:
            return original(*args, **kwargs)
        finally:
            _kept(name, time.perf_counter_ns() - started)

    setattr(owner, attribute, called)


def timed_block(owner: Any, attribute: str, name: str) -> None:
    """Time entering (`name` taken) and leaving (`name` given back) an async context manager
    that `owner.attribute` makes."""
    original: Callable[..., contextlib.AbstractAsyncContextManager[None]] = getattr(
        owner, attribute
    )

    @contextlib.asynccontextmanager
    async def held(*args: Any, **kwargs: Any) -> AsyncIterator[None]:
        started = time.perf_counter_ns()
        async with original(*args, **kwargs):
            _kept(f"{name} taken", time.perf_counter_ns() - started)
            yield
            started = time.perf_counter_ns()
        _kept(f"{name} given back", time.perf_counter_ns() - started)

    setattr(owner, attribute, held)


def wrap_steps() -> None:
    timed(CheckedWorkspaces, "check", "workspace checked")
    timed(service_module.Sandboxes, "_bounded", "workspace size bound")
    timed_block(SharedSlots, "slot", "tenant slot")
    timed(CommandCgroup, "__init__", "cgroup made")
    timed(CommandCgroup, "aclose", "cgroup killed and removed")
    timed(GitGuard, "plan", "git plan")
    timed(GitGuard, "sweep", "git sweep")
    timed(WarmSandbox, "run", "init runs the command")
    timed(BwrapBackend, "run", "backend run")
    timed(service_module.Sandboxes, "exec", "handler")


async def measure(root: Path, calls: int) -> tuple[list[float], list[float]]:
    workspace = sandbox_workspace(root / "work")
    argv = raw_bwrap_argv(workspace)
    through: list[float] = []
    raw: list[float] = []
    with running_nats_server(root / "nats") as url:
        settings = SandboxSettings(nats_url=url, state_dir=str(root / "state"))
        async with (
            connect(settings, "bench-sandbox") as connection,
            sandbox_service(connection, settings) as service,
            anyio.create_task_group(),
            service.running(connection, drain_timeout_s=5.0),
            connect(settings, "bench") as client,
        ):
            message = ExecRequest(session_id=SESSION, workspace=str(workspace), command="true")
            for number in range(calls + 5):
                if number == 5:
                    steps.clear()
                started = time.perf_counter_ns()
                result = await request(
                    client, subjects.SANDBOX_EXEC, message, ExecResult, timeout_s=60
                )
                took = time.perf_counter_ns() - started
                if result.exit_status != 0:
                    raise SystemExit(f"`true` failed in the sandbox: {result.stderr}")
                started = time.perf_counter_ns()
                await anyio.to_thread.run_sync(lambda: subprocess.run(argv, check=True))
                raw_took = time.perf_counter_ns() - started
                if number >= 5:
                    through.append(took)
                    raw.append(raw_took)
    return through, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls")
    args = parser.parse_args()
    wrap_steps()
    with tempfile.TemporaryDirectory() as tmp:
        through, raw = anyio.run(measure, Path(tmp), args.calls)
    print(f"{args.calls} calls after 5 warm-up calls; load average {os.getloadavg()[0]:.1f}")
    print(f"{'step':<34} {'median ms':>10}")
    for name, took in steps.items():
        print(f"{name:<34} {statistics.median(took) / 1e6:>10.3f}")
    median, raw_median = statistics.median(through) / 1e6, statistics.median(raw) / 1e6
    print(
        f"sandbox.exec over NATS: median {median:.3f} ms, p99 "
        f"{percentile(through, 0.99) / 1e6:.3f} ms; raw cold bwrap true: median "
        f"{raw_median:.3f} ms; ratio {median / raw_median:.2f}x"
    )


if __name__ == "__main__":
    main()
