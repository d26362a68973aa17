"""Running one command hook: the event on stdin, a deadline, and what came of it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any, Final

import anyio
import msgspec
from anyio.abc import ByteReceiveStream

from bastion.shared.sandboxing.gitguard import LOCKED_GIT_ENVIRONMENT

__all__ = ["MAX_OUTPUT", "Ran", "hook_environment", "run_command"]

MAX_OUTPUT: Final = 64 * 1024
"""The most of each of a hook's output streams that is kept."""


@dataclass(frozen=True)
class Ran:
    """How a hook command ended: its status (None if it did not start or ran out of time)."""

    status: int | None
    stdout: str
    stderr: str
    failure: str = ""
    """Why it has no status, in words: `did not start (...)`, `ran out of its 30 s`."""

    def said(self) -> str:
        return self.stderr.strip() or self.stdout.strip()


async def _read(stream: ByteReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    async for chunk in stream:
        room = MAX_OUTPUT - len(into)
        if room > 0:
            into.extend(chunk[:room])


def hook_environment(event: str, session_id: str, workdir: str | None) -> dict[str, str]:
    """The hook's environment: the user's who runs Bastion, without Bastion's own settings
    (a NATS password among them) and with git locked down: the workspace's git control
    files are the agent's to try, so no git setting of anyone may run a program, and
    none of the user's `GIT_*` variables passes. In a workspace that is a repository its
    git is pinned to the workspace's own `.git` (`GIT_DIR`, `GIT_COMMON_DIR`): a
    `commondir` something of the session put back since the last sweep cannot lead it to
    another config (a filter there would run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BASTION_", "GIT_"))}
    env.update(LOCKED_GIT_ENVIRONMENT)
    git = os.path.join(workdir, ".git") if workdir is not None else None
    if git is not None and os.path.isdir(git) and not os.path.islink(git):
        env.update({"GIT_DIR": git, "GIT_COMMON_DIR": git, "GIT_WORK_TREE": workdir or ""})
    env["BASTION_HOOK_EVENT"] = event
    env["BASTION_SESSION"] = session_id
    return env


def _runs_as(workdir: str | None) -> tuple[int | None, int | None]:
    """Who a hook runs as: under a root runner, in a workspace, its owner (the user its
    sandbox runs as), so that nothing an agent left there — a git setting, a link to a
    root-only file, a program — acts with root's rights; else the runner's own user."""
    if workdir is None or os.geteuid() != 0:
        return None, None
    info = os.stat(workdir)
    if info.st_uid == 0 or info.st_gid == 0:
        return None, None  # root's: no agent's sandbox runs there (it would be refused)
    return info.st_uid, info.st_gid


async def run_command(
    command: list[str], event: dict[str, Any], cwd: str | None, timeout_s: float
) -> Ran:
    """Run `command` with `event` as JSON on its stdin, stopped (its whole process group)
    after `timeout_s`; in a workspace under a root runner, as the workspace's owner."""
    workdir = cwd if cwd and await anyio.Path(cwd).is_dir() else None
    user, group = _runs_as(workdir)
    try:
        process = await anyio.open_process(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=hook_environment(str(event["event"]), str(event["session"]), workdir),
            start_new_session=True,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )
    except OSError as error:
        return Ran(None, "", "", f"did not start ({error.strerror or type(error).__name__})")
    stdout, stderr = bytearray(), bytearray()
    async with process:
        with anyio.move_on_after(timeout_s) as deadline:
            async with anyio.create_task_group() as streams:
                streams.start_soon(_read, process.stdout, stdout)
                streams.start_soon(_read, process.stderr, stderr)
                if process.stdin is not None:
                    # a hook need not read its event
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await process.stdin.send(msgspec.json.encode(event))
                    await process.stdin.aclose()
            await process.wait()
        if deadline.cancelled_caught:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True):
                await process.wait()
            return Ran(
                None,
                stdout.decode(errors="replace"),
                stderr.decode(errors="replace"),
                f"ran out of its {timeout_s:g} s",
            )
    return Ran(process.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace"))
