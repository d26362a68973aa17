"""A background task's working directory: relative to the workspace, inside it once its
links are followed, and a directory."""

from __future__ import annotations

import posixpath
from pathlib import Path

from bastion.shared.errors import InvalidInput

__all__ = ["checked_cwd"]

_SHOWN = 120
"""How much of a refused `cwd` its refusal quotes."""


def checked_cwd(workspace: Path, cwd: str) -> str:
    """`cwd` as a path relative to the workspace (empty: the workspace itself).

    Raises:
        InvalidInput: it leaves the workspace (`..`, an absolute path outside it, a link
            out of it) or is not a directory there.
    """
    shown = repr(cwd if len(cwd) <= _SHOWN else cwd[:_SHOWN] + "…")
    inside = cwd == "/workspace" or cwd.startswith("/workspace/") or not cwd.startswith("/")
    relative = posixpath.normpath(cwd.removeprefix("/workspace").lstrip("/") or ".")
    if not inside or relative == ".." or relative.startswith("../"):
        raise InvalidInput(
            f"cwd {shown} is not inside the workspace: give a directory relative to it "
            "(src, or . for the workspace itself)"
        )
    if relative == ".":
        return ""
    root = workspace.resolve()
    try:
        target = (root / relative).resolve()
        found = target.is_relative_to(root) and target.is_dir()
    except (OSError, RuntimeError, ValueError):  # a loop of links, a name too long, a NUL
        found = False
    if not found:
        raise InvalidInput(
            f"cwd {shown} is not a directory of the workspace (a link out of it counts as "
            "outside): give an existing directory relative to the workspace"
        )
    return target.relative_to(root).as_posix()
