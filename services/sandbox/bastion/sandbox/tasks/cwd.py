"""A background task's working directory: relative to the workspace, inside it once its
links are followed, and a directory."""

from __future__ import annotations

import posixpath
from pathlib import Path

from bastion.shared.errors import InvalidInput

__all__ = ["checked_cwd"]


def checked_cwd(workspace: Path, cwd: str) -> str:
    """`cwd` as a path relative to the workspace (empty: the workspace itself).

    Raises:
        InvalidInput: it leaves the workspace (`..`, an absolute path outside it, a link
            out of it) or is not a directory there.
    """
    inside = cwd == "/workspace" or cwd.startswith("/workspace/") or not cwd.startswith("/")
    relative = posixpath.normpath(cwd.removeprefix("/workspace").lstrip("/") or ".")
    if not inside or relative == ".." or relative.startswith("../"):
        raise InvalidInput(
            f"cwd {cwd!r} is not inside the workspace: give a directory relative to it "
            "(src, or . for the workspace itself)"
        )
    if relative == ".":
        return ""
    root = workspace.resolve()
    target = (root / relative).resolve()
    if not target.is_relative_to(root) or not target.is_dir():
        raise InvalidInput(
            f"cwd {cwd!r} is not a directory of the workspace (a link out of it counts as "
            "outside): give an existing directory relative to the workspace"
        )
    return target.relative_to(root).as_posix()
