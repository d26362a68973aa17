"""How much disk a workspace holds, against the operator's bound (`BASTION_WORKSPACE_MAX_BYTES`).

The sandbox service measures the workspace before each command and each file write: a
walk by descriptors from the workspace's own (no link followed, every directory counted,
`.git` and dependencies too), summing the blocks each file holds (a sparse file counts
what it holds, a file with several links once). The walk stops after `MAX_MEASURED`
entries, and goes at most `_MAX_DEPTH` directories down; what it counted is then the
measure (a lower bound).

This is a soft bound: it is checked between calls, so the one command that crosses it runs
to its end (each of its files bounded by `RLIMIT_FSIZE`, lowered to the room left but
never below `LEAST_FILE_BYTES`). A hard bound needs the filesystem's: an XFS project quota
on the workspaces' directory, or a volume of its own per workspace (a Kubernetes
`emptyDir` with `sizeLimit`, a sized PVC).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from bastion.sandbox.files import _DIR_FLAGS
from bastion.shared.errors import QuotaExceeded

__all__ = ["LEAST_FILE_BYTES", "MAX_MEASURED", "WorkspaceBound", "workspace_bytes"]

MAX_MEASURED: Final = 200_000
"""A measure stops after this many entries, so a huge tree cannot keep the service busy."""
_MAX_DEPTH: Final = 256
"""Directories deeper are not measured: a descriptor stays open per level walked."""
LEAST_FILE_BYTES: Final = 64 * 1024
"""The file size limit a command keeps however full its workspace: the sandbox's launcher
writes its generated files (`/etc/passwd` and the like) under the same limit."""


class _Measure:
    """One measure's running totals: bytes, entries seen, inodes with several links."""

    def __init__(self, limit: int) -> None:
        self.total = 0
        self.entries = 0
        self.limit = limit
        self._linked: set[tuple[int, int]] = set()

    def directories_in(self, fd: int) -> list[str]:
        """Count what the directory `fd` holds; the names of its subdirectories."""
        found = []
        with os.scandir(fd) as scan:
            for entry in scan:
                self.entries += 1
                if self.entries > self.limit:
                    break
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone meanwhile
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    if (info.st_dev, info.st_ino) in self._linked:
                        continue
                    self._linked.add((info.st_dev, info.st_ino))
                self.total += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    found.append(entry.name)
        return found


def workspace_bytes(workspace: Path, limit: int = MAX_MEASURED) -> int:
    """The bytes of disk the files under `workspace` hold (at most `limit` entries seen,
    `_MAX_DEPTH` directories down)."""
    measure = _Measure(limit)
    top = os.open(workspace, _DIR_FLAGS)
    # Depth first, one descriptor open per level: (directory, subdirectories still to see).
    stack = [(top, measure.directories_in(top))]
    try:
        while stack and measure.entries <= limit:
            fd, pending = stack[-1]
            if not pending or len(stack) > _MAX_DEPTH:
                os.close(stack.pop()[0])
                continue
            try:
                child = os.open(pending.pop(), _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # replaced by a link, or unreadable
            try:
                stack.append((child, measure.directories_in(child)))
            except OSError:
                os.close(child)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return measure.total


class WorkspaceBound:
    """The operator's bound on a workspace's size; 0 means none."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes

    def room(self, workspace: Path) -> int | None:
        """How many bytes the workspace may still grow by (0 or less: none), None unbounded."""
        if not self._max:
            return None
        return self._max - workspace_bytes(workspace)

    def over(self, room: int) -> str:
        """What a call is told when the workspace is at or over its bound."""
        return (
            f"the workspace holds {self._max - room} bytes, at or over its bound of "
            f"{self._max} (BASTION_WORKSPACE_MAX_BYTES): delete files it no longer needs to "
            f"make room; until then commands run but no file may grow past "
            f"{LEAST_FILE_BYTES} bytes, and file tools do not write"
        )

    def check_write(self, workspace: Path, size: int) -> None:
        """Refuse a file write of `size` bytes that would take the workspace over its bound
        (an edit, whose growth is bounded by its message, passes 0: refused only when over).

        Raises:
            QuotaExceeded: saying how full it is and what frees room.
        """
        room = self.room(workspace)
        if room is not None and (room <= 0 or size > room):
            raise QuotaExceeded(
                self.over(room)
                if room <= 0
                else (
                    f"writing {size} bytes would take the workspace over its bound of "
                    f"{self._max} bytes (BASTION_WORKSPACE_MAX_BYTES; {room} left): delete "
                    "files it no longer needs to make room, or write less"
                )
            )
