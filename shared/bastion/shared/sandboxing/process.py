"""Running a process in its own session under a wall clock, its output read and capped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterable, Mapping, Sequence
from dataclasses import dataclass

import anyio

from bastion.shared.sandboxing.output import CappedOutput, OutputTap, capped_pair
from bastion.shared.sandboxing.pidone import PidOne

__all__ = ["DRAIN_GRACE_S", "Finished", "run_limited"]

DRAIN_GRACE_S = 5.0
"""How long output is still read once the process is gone: its pipes close when the last
process holding them ends, which for a sandbox is at once (its pid namespace goes with it)."""


@dataclass(frozen=True)
class Finished:
    """How a limited run ended: the process's own status, or the wall clock running out."""

    returncode: int
    timed_out: bool
    stdout: CappedOutput
    stderr: CappedOutput
    duration_s: float


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


async def _until_closed(stream: AsyncIterable[bytes] | None) -> None:
    """Read and drop what is left, until every process holding the pipe has gone."""
    if stream is not None:
        async for _ in stream:
            pass


async def _watch(scope: anyio.CancelScope, pid_one: PidOne, launcher: int) -> None:
    with scope:
        await pid_one.watch(launcher)


async def run_limited(
    argv: Sequence[str],
    *,
    wall_s: float,
    output_bytes: int,
    env: Mapping[str, str],
    pass_fds: Sequence[int] = (),
    pid_one: PidOne | None = None,
    tap: OutputTap | None = None,
) -> Finished:
    """Run `argv` with stdin closed until it ends or `wall_s` runs out.

    The process leads a new session, so running out of time (or the caller being
    cancelled) kills its whole process group with SIGKILL, children included. With
    `pid_one` (a sandbox's pid 1, which is in a session of its own) that process is
    killed directly too, first, and once the process has ended, and the run returns only
    after it is gone, and with it every process of its namespace. It returns once both
    output pipes are closed, that is once every process holding them has gone (or after
    `DRAIN_GRACE_S`, should one outlive the process it came from). Each chunk read is
    also given to `tap`.
    """
    started = time.monotonic()
    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    stdout, stderr = capped_pair(output_bytes, tap)
    timed_out = False
    try:
        assert process.stdout is not None and process.stderr is not None
        async with anyio.create_task_group() as readers:
            readers.start_soon(stdout.drain, process.stdout)
            readers.start_soon(stderr.drain, process.stderr)
            watching = anyio.CancelScope()
            if pid_one is not None:
                readers.start_soon(_watch, watching, pid_one, process.pid)
            with anyio.move_on_after(wall_s):
                await process.wait()
            watching.cancel()
            if process.returncode is None:
                timed_out = True
                if pid_one is not None:
                    pid_one.kill()
                _kill_group(process.pid)
                await process.wait()
            readers.cancel_scope.deadline = anyio.current_time() + DRAIN_GRACE_S
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:  # cancelled, or failed, while it ran
                if pid_one is not None:
                    pid_one.kill()
                _kill_group(process.pid)
                with anyio.move_on_after(DRAIN_GRACE_S):
                    await process.wait()
                    await _until_closed(process.stdout)
                    await _until_closed(process.stderr)
            if pid_one is not None:
                await pid_one.gone()
            await process.aclose()
    returncode = process.returncode
    assert returncode is not None
    return Finished(
        returncode=returncode,
        timed_out=timed_out,
        stdout=stdout,
        stderr=stderr,
        duration_s=time.monotonic() - started,
    )
