"""The pid 1 of a cold sandbox, held by a pidfd, so the service can kill it directly.

bwrap starts the command's pid 1 (`--as-pid-1`) and says its host pid on its JSON status
pipe (`child-pid`). Killing that process from outside kills every process of the
sandbox's pid namespace; `PR_SET_PDEATHSIG` (bwrap's `--die-with-parent`) is not enough,
since a command that traces its own pid 1 can clear it (docs/sandbox.md, "What ends a
command's processes"). A pidfd, opened while bwrap is still the process's parent, names
that process and no later one with the same pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal

import anyio

__all__ = ["PidOne"]


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("PPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class PidOne:
    """Reads bwrap's status pipe `status_fd` (what it said is `said`) and holds a pidfd of
    the sandbox's pid 1 once bwrap named it."""

    def __init__(self, status_fd: int) -> None:
        self._status = status_fd
        self.said = b""
        self._pidfd: int | None = None

    async def watch(self, launcher: int) -> None:
        """Read the status pipe until its first line (naming pid 1) is whole, or it closes;
        take a pidfd of that pid, if it is still the child of `launcher` (bwrap, which the
        launcher execs)."""
        os.set_blocking(self._status, False)
        while b"\n" not in self.said:
            await anyio.wait_readable(self._status)
            try:
                chunk = os.read(self._status, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                return
            self.said += chunk
        self._hold(launcher)

    def _hold(self, launcher: int) -> None:
        try:
            pid = int(json.loads(self.said.partition(b"\n")[0])["child-pid"])
            pidfd = os.pidfd_open(pid)
        except (ValueError, TypeError, KeyError, OSError):
            return  # bwrap did not start it, or it is already gone, its namespace with it
        if _parent(pid) == launcher:
            self._pidfd = pidfd
        else:
            os.close(pidfd)

    def kill(self) -> None:
        """SIGKILL the sandbox's pid 1, so every process of its namespace dies with it."""
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    async def gone(self) -> None:
        """Kill pid 1 and wait until it has ended: the kernel ends it only once every other
        process of its namespace is gone."""
        if self._pidfd is not None:
            self.kill()
            await anyio.wait_readable(self._pidfd)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
