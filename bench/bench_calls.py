"""What a call costs through the whole plane, against a baseline measured in the same run.

It starts `bastion up` on a temporary state dir, opens a session, and times:
- `read_file` through agent → orchestrator → policy → sandbox, against reading the same
  file directly in this process;
- `shell true` through the same path, against a raw `bwrap … true` with the same kind of
  sandbox (new namespaces, read-only /usr, the workspace bound, uid 10001).

It prints the median and p99 of each in milliseconds and the ratio of the medians.
Usage: python bench/bench_calls.py [--calls N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, connect, request
from bastion.shared.settings import BusSettings


def raw_bwrap_argv(workspace: Path) -> list[str]:
    """A cold bubblewrap sandbox like the plane's, without Bastion in front of it."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "10001", "--gid", "10001"]
    argv += ["--die-with-parent", "--new-session", "--clearenv", "--ro-bind", "/usr", "/usr"]
    for directory in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(directory):
            argv += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            argv += ["--ro-bind", directory, directory]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--bind", str(workspace), "/workspace", "--chdir", "/workspace", "true"]
    return argv


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def timed(calls: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    for _ in range(min(5, calls)):
        await one()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await one()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def call(client: Client, session_id: str, tool: str, **tool_input: object) -> None:
    result: CallResult = await request(
        client,
        subjects.session_call(session_id),
        ToolCall(tool=tool, input=dict(tool_input)),
        CallResult,
        timeout_s=60,
    )
    if not isinstance(result, ToolOutput):
        raise SystemExit(f"{tool} failed: {result.message}")


async def measure(
    nats_url: str, workspace: Path, calls: int
) -> list[tuple[str, list[float], list[float]]]:
    target = workspace / "notes.txt"
    target.write_text("a line of notes\n" * 64)
    argv = raw_bwrap_argv(workspace)

    async def read_directly() -> None:
        target.read_text()

    async def raw_bwrap() -> None:
        await anyio.to_thread.run_sync(lambda: subprocess.run(argv, check=True))

    async with connect(BusSettings(nats_url=nats_url), "bench") as client:
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

        return [
            (
                "read_file (vs direct read)",
                await timed(calls, read_through_bastion),
                await timed(calls, read_directly),
            ),
            (
                "shell true (vs raw bwrap true)",
                await timed(calls, shell_through_bastion),
                await timed(calls, raw_bwrap),
            ),
        ]


def report(rows: list[tuple[str, list[float], list[float]]]) -> None:
    columns = ("median ms", "p99 ms", "base median", "base p99", "ratio")
    print(f"{'measure':<32} " + " ".join(f"{c:>11}" for c in columns))
    for name, through, base in rows:
        median, base_median = statistics.median(through), statistics.median(base)
        print(
            f"{name:<32} {median:>11.3f} {percentile(through, 0.99):>11.3f} "
            f"{base_median:>11.3f} {percentile(base, 0.99):>11.3f} {median / base_median:>10.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir, workspace = Path(tmp) / "state", Path(tmp) / "work"
        workspace.mkdir()
        up = subprocess.Popen(
            [sys.executable, "-m", "bastion.cli", "up", "--state-dir", str(state_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert up.stdout is not None
            for line in up.stdout:
                if line.startswith(("ready:", "error:")):
                    break
            if not line.startswith("ready:"):
                raise SystemExit(f"bastion up did not start: {line}")
            nats_url = json.loads((state_dir / "run" / "up.json").read_text())["nats_url"]
            print(f"{args.calls} calls each, after 5 warm-up calls; bastion up on {nats_url}")
            report(anyio.run(measure, nats_url, workspace, args.calls))
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(timeout=60)


if __name__ == "__main__":
    main()
