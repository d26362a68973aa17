"""What the benchmarks share: a `bastion up` to measure against, the raw-bwrap baseline, stats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from bastion.cli.natsserver import free_port
from bastion.proto import subjects
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from bastion.shared.statedir import find_bus_settings, read_run_record

__all__ = [
    "bastion_up",
    "call",
    "cpu_ms",
    "percentile",
    "raw_bwrap_argv",
    "sandbox_workspace",
]

BENCH_UID = 1000
"""The unprivileged host user a root run gives its workspaces to: a root service runs each
sandbox as its workspace's owner, never as root, and refuses a root-owned workspace."""


@contextmanager
def bastion_up(
    state_dir: Path, *args: str, env: Mapping[str, str] | None = None
) -> Iterator[BusSettings]:
    """`bastion up` on `state_dir` (with `args`, in `env`: this process's environment by
    default), as a user runs it; yields how its operator connects (the URL, and the
    operator's NATS user `bastion up` wrote); stopped on exit. Its front door listens on a
    free port unless `args` name one (other runs may hold the default)."""
    if "--http-port" not in args:
        args = (*args, "--http-port", str(free_port()))
    up = subprocess.Popen(
        [sys.executable, "-m", "bastion.cli", "up", "--state-dir", str(state_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=None if env is None else dict(env),
    )
    try:
        assert up.stdout is not None
        last = ""
        for last in up.stdout:
            if last.startswith(("ready:", "error:")):
                break
        if not last.startswith("ready:"):
            raise SystemExit(f"bastion up did not start: {last}")
        yield find_bus_settings(None, state_dir, env={})
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)


def sandbox_workspace(path: Path) -> Path:
    """`path` made a workspace a root `bastion up` runs sandboxes in: as root, given to
    `BENCH_UID`, and the directories above it that let nobody through (a temporary
    directory is 0700) made passable (not readable)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        for each in (path, *path.rglob("*")):
            os.lchown(each, BENCH_UID, BENCH_UID)
        for parent in path.parents:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                parent.chmod((mode & 0o7777) | 0o001)
    return path


def raw_bwrap_argv(workspace: Path) -> list[str]:
    """A cold bubblewrap sandbox like the plane's, without Bastion in front of it: as root,
    started as the workspace's unprivileged owner (`setpriv`), as the plane starts it."""
    argv = []
    if os.geteuid() == 0:
        owner = workspace.stat()
        argv += ["setpriv", f"--reuid={owner.st_uid}", f"--regid={owner.st_gid}"]
        argv += ["--clear-groups", "--"]
    argv += ["bwrap", "--unshare-all", "--unshare-user", "--uid", "10001", "--gid", "10001"]
    argv += ["--die-with-parent", "--new-session", "--clearenv", "--ro-bind", "/usr", "/usr"]
    for directory in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(directory):
            argv += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            argv += ["--ro-bind", directory, directory]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--bind", str(workspace), "/workspace", "--chdir", "/workspace", "true"]
    return argv


def cpu_ms(state_dir: Path) -> dict[str, float]:
    """The CPU time (user and system, ms) each service instance of `bastion up` on
    `state_dir` has used so far, from /proc: what a call cost each, whatever the load."""
    record = read_run_record(state_dir)
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    used = {}
    for name, pid in sorted((record.children if record else {}).items()):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[name] = (int(fields[11]) + int(fields[12])) * tick_ms
    return used


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def call(client: Client, session_id: str, tool: str, **tool_input: object) -> None:
    """One call through the plane; a refusal stops the benchmark, saying why."""
    result: CallResult = await request(
        client,
        subjects.session_call(session_id),
        ToolCall(tool=tool, input=dict(tool_input)),
        CallResult,
        timeout_s=300,
    )
    if not isinstance(result, ToolOutput):
        raise SystemExit(f"{tool} failed: {result.message}")
