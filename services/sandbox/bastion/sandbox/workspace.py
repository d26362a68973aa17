"""The checks a request's directories pass (workspace, read-only dirs, skills) before use.

`shown` and `overlaps` live in `bastion.shared.dirchecks` (the mcp service checks an
upstream server's directories with them too); they are named here for this service's
modules. `CheckedWorkspaces` keeps each workspace's check for the calls after it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bastion.shared.dirchecks import (
    check_apart_from_state,
    check_not_showing_state,
    check_skills_apart,
    overlaps,
    shown,
)
from bastion.shared.errors import InvalidInput

__all__ = [
    "CheckedWorkspaces",
    "check_skills_dir",
    "checked_read_only_dirs",
    "checked_workspace",
    "overlaps",
    "shown",
]


def _existing_dir(what: str, given: str, if_missing: str) -> Path:
    """`given` resolved, once it is an absolute path to an existing directory; `what` names
    it in the sentences, `if_missing` says what to do when it does not exist.

    Raises:
        InvalidInput: what is wrong with it and what to give instead.
    """
    path = Path(given)
    if not path.is_absolute():
        raise InvalidInput(
            f"{what} {shown(given)} is not an absolute path: give its full path, starting with /"
        )
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InvalidInput(f"{what} {shown(given)} does not exist: {if_missing}") from None
    if not resolved.is_dir():
        raise InvalidInput(f"{what} {shown(given)} is not a directory: give a directory")
    return resolved


def checked_workspace(workspace: str, state_dir: Path) -> Path:
    """`workspace` resolved, once it is an absolute, existing directory apart from `state_dir`.

    Raises:
        InvalidInput: what is wrong with it and what to give instead.
    """
    resolved = _existing_dir(
        "the workspace", workspace, "create the directory first, or give one that exists"
    )
    check_apart_from_state(
        "the workspace", workspace, resolved, state_dir, "give a workspace apart from it"
    )
    return resolved


def _identity(look: Callable[[str], os.stat_result], path: str) -> tuple[int, int] | None:
    """The device and inode `look` (`os.stat` or `os.lstat`) finds at `path`; None: none."""
    try:
        info = look(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


_KEPT_WORKSPACES: Final = 4096
"""The most workspaces whose check `CheckedWorkspaces` keeps (the least recently used go)."""


class CheckedWorkspaces:
    """`checked_workspace` for one service's calls, each answer kept for the next calls of
    the same workspace path while that path still leads to the very directory the check
    resolved (the same device and inode through the given path, `stat`, and at the resolved
    one, `lstat`): two system calls instead of a walk of every component of both the
    workspace's and the state dir's path. A path that now leads elsewhere (a link above it
    re-pointed, the directory replaced or gone) is checked again from the start."""

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = state_dir
        self._kept: OrderedDict[str, tuple[Path, tuple[int, int]]] = OrderedDict()

    def check(self, workspace: str) -> Path:
        """`workspace` resolved, as `checked_workspace` answers it.

        Raises:
            InvalidInput: what is wrong with it and what to give instead.
        """
        kept = self._kept.get(workspace)
        if kept is not None:
            resolved, identity = kept
            if _identity(os.stat, workspace) == identity == _identity(os.lstat, str(resolved)):
                self._kept.move_to_end(workspace)
                return resolved
            del self._kept[workspace]
        resolved = checked_workspace(workspace, self._state_dir)
        try:
            info = os.lstat(resolved)
        except OSError:
            return resolved  # gone meanwhile: the call says so, and nothing is kept
        self._kept[workspace] = (resolved, (info.st_dev, info.st_ino))
        if len(self._kept) > _KEPT_WORKSPACES:
            self._kept.popitem(last=False)
        return resolved


_RESERVED: tuple[str, ...] = ("/workspace", "/proc", "/dev")
"""Paths inside the sandbox that an extra read-only directory may not be mounted over."""


def checked_read_only_dirs(dirs: tuple[str, ...], state_dir: Path) -> tuple[Path, ...]:
    """Each extra read-only directory resolved, once none of them shows the state dir.

    Raises:
        InvalidInput: which directory is wrong, why, and what to give instead.
    """
    checked: list[Path] = []
    for given in dirs:
        resolved = _existing_dir("the read-only directory", given, "give one that exists")
        check_not_showing_state("the read-only directory", given, resolved, state_dir)
        if resolved == Path("/") or any(
            resolved.is_relative_to(reserved) for reserved in _RESERVED
        ):
            raise InvalidInput(
                f"the read-only directory {shown(given)} would cover the sandbox's own "
                "/workspace, /proc or /dev: give a directory elsewhere"
            )
        checked.append(resolved)
    return tuple(checked)


def check_skills_dir(skills_dir: str, workspace: Path) -> None:
    """Refuse a skills directory that overlaps the workspace (a command could rewrite a
    skill, or grant itself what a skill declares).

    Raises:
        InvalidInput: the overlap, and what to give instead.
    """
    check_skills_apart(
        skills_dir, "the workspace", workspace, "a command could change a skill unchecked"
    )
