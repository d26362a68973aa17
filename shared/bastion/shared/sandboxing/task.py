"""A background task as a backend hands it out: wait for its end, stop it (SIGTERM to its
process group, SIGKILL to every process of it later); the bubblewrap one, in a session's
warm sandbox, releases what it leaves (its cgroup, its git plan) once it has ended
(docs/sandbox.md, "Background tasks")."""

from __future__ import annotations

import contextlib
from typing import Protocol

import anyio

from bastion.shared.sandboxing.cgroup import CommandCgroup
from bastion.shared.sandboxing.warm import WarmTask

__all__ = ["SandboxTask", "WarmSandboxTask"]


class SandboxTask(Protocol):
    """One started task, whichever backend runs it."""

    async def wait(self) -> int | None:
        """Its exit status once every process of it is gone (None: its sandbox ended
        first)."""
        ...

    def limit_hit(self) -> str:
        """The limit it was seen to hit (`oom`, `process_limit`), else empty."""
        ...

    def terminate(self) -> None:
        """SIGTERM to the task's process group."""
        ...

    def kill(self) -> None:
        """SIGKILL to every process of the task."""
        ...


class WarmSandboxTask:
    """One task of a warm bubblewrap sandbox: its channel, its cgroup and its git plan."""

    def __init__(
        self, task: WarmTask, cgroup: CommandCgroup | None, kept: contextlib.ExitStack
    ) -> None:
        self._task = task
        self._cgroup = cgroup
        self._kept = kept

    async def wait(self) -> int | None:
        """Its exit status once every process of it is gone (None: its sandbox ended
        first); its cgroup and git plan are released then."""
        try:
            return await self._task.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if self._cgroup is not None:
                    self._cgroup.kill()
                    await self._cgroup.aclose()
                self._kept.close()

    def limit_hit(self) -> str:
        """The limit its cgroup saw it hit (`oom`, `process_limit`), else empty."""
        return self._cgroup.limit_hit() if self._cgroup is not None else ""

    def terminate(self) -> None:
        """SIGTERM to the task's process group (its pid 1, the sandbox's shell, keeps
        running until what it runs has ended)."""
        self._task.signal("term")

    def kill(self) -> None:
        """SIGKILL to every process of the task: its cgroup, and its pid namespace's pid 1
        (so what a double fork or a `setsid` left dies with it)."""
        if self._cgroup is not None:
            self._cgroup.kill()
        self._task.signal("kill")
