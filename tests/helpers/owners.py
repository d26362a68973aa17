"""Workspaces owned by an unprivileged host user, as a root sandbox service requires.

A root service runs each sandbox as its workspace's owner and refuses a root-owned one, so
a test (which runs as root, under a root-owned `tmp_path`) gives its workspace, and what it
puts there, to `OWNER` before a command runs in it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["OWNER_GID", "OWNER_UID", "owned"]

OWNER_UID: Final = 1000
OWNER_GID: Final = 1000


def owned(path: Path) -> Path:
    """`path` (a directory, made if missing) and all under it given to `OWNER_UID`, and its
    parents made searchable by that user (pytest makes its base directory 0700)."""
    path.mkdir(parents=True, exist_ok=True)
    for each in (path, *path.rglob("*")):
        os.lchown(each, OWNER_UID, OWNER_GID)
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    return path
