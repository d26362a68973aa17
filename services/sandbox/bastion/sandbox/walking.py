"""Walking workspace directories without ever leaving the workspace, and `list_files`.

A walk starts from a directory reached like any file tool's path (no link out, no `..`
above the workspace) and goes down by descriptors opened with `O_NOFOLLOW`: a symbolic
link is reported as a link and never followed, so a link to `/` or to a sibling tree
shows nothing of it. Version control's, dependencies' and builds' directories are passed
over, and a walk stops after a bounded number of entries so that a huge tree cannot keep
the service busy. `list_files` names no entry the policy keeps from the session (`hidden`,
judged from `list_candidates`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from bastion.proto.toolinput import ListFilesInput
from bastion.sandbox.files import _DIR_FLAGS, _locate
from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput, NotFound

__all__ = [
    "MAX_WALKED",
    "PASSED_OVER",
    "Entry",
    "Walk",
    "list_candidates",
    "list_files",
    "open_directory",
    "shown_root",
]

PASSED_OVER: Final = frozenset({".git", "node_modules", "target", ".venv", "__pycache__"})
"""Directories the listing, finding and searching tools never go into."""
MAX_WALKED: Final = 100_000
"""A walk stops after this many entries, and says so."""
MAX_LISTED: Final = 1000


@dataclass(frozen=True)
class Entry:
    """One entry met on a walk: its path from the walk's start, its name, and its kind.

    `parent` is the descriptor of its directory, valid only until the walk moves on.
    """

    path: str
    name: str
    kind: Literal["file", "dir", "link", "other"]
    parent: int


def open_directory(workspace: Path, path: str) -> int:
    """A descriptor (the caller's to close) of a workspace directory, reached confined."""
    parent, name = _locate(workspace, path, make_dirs=False, directory=True)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise NotFound(
            f"there is no directory {shown(path)} in the workspace: check the path"
        ) from None
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise InvalidInput(
                f"{shown(path)} is not a directory: give a directory's path"
            ) from None
        raise InvalidInput(f"{shown(path)} cannot be opened: {error.strerror}") from None
    finally:
        os.close(parent)


def shown_root(path: str) -> str:
    """The prefix a walk's paths get so that they read as paths from the workspace's root."""
    parts = [p for p in path.removeprefix("/workspace").split("/") if p not in ("", ".")]
    return "/".join(parts) + "/" if parts else ""


def _kind(entry: os.DirEntry[str]) -> Literal["file", "dir", "link", "other"]:
    if entry.is_symlink():
        return "link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


class Walk:
    """Every entry under a directory descriptor, depth first, names sorted; `cut` is set
    when the walk stopped at `MAX_WALKED` entries."""

    def __init__(self, top: int, limit: int = MAX_WALKED) -> None:
        self._top = top
        self._limit = limit
        self.seen = 0
        self.cut = False

    def __iter__(self) -> Iterator[Entry]:
        yield from self._under(self._top, "")

    def _under(self, fd: int, prefix: str) -> Iterator[Entry]:
        with os.scandir(fd) as scan:
            entries = sorted(((e.name, _kind(e)) for e in scan), key=lambda e: e[0])
        for name, kind in entries:
            if kind == "dir" and name in PASSED_OVER:
                continue
            self.seen += 1
            if self.seen > self._limit:
                self.cut = True
                return
            yield Entry(prefix + name, name, kind, fd)
            if kind != "dir":
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, replaced by a link, or unreadable: nothing to show of it
            try:
                yield from self._under(child, f"{prefix}{name}/")
            finally:
                os.close(child)
            if self.cut:
                return


def _holds_anything(parent: int, name: str) -> bool:
    """Whether the directory `name` in `parent` has an entry (an unreadable one counts)."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
    except OSError:
        return True
    try:
        with os.scandir(fd) as scan:
            return any(True for _ in scan)
    finally:
        os.close(fd)


def list_candidates(workspace: Path, request: ListFilesInput) -> list[str]:
    """The workspace path of each entry `list_files` would name, before any is hidden."""
    top = open_directory(workspace, request.path)
    try:
        with os.scandir(top) as scan:
            names = sorted(e.name for e in scan)
    finally:
        os.close(top)
    prefix = shown_root(request.path)
    return [prefix + name for name in names]


def list_files(
    workspace: Path, request: ListFilesInput, hidden: frozenset[str] = frozenset()
) -> str:
    """The entries of one directory, sorted; directories end with `/`, links with `@`; none
    whose workspace path is in `hidden`."""
    prefix = shown_root(request.path)
    top = open_directory(workspace, request.path)
    try:
        with os.scandir(top) as scan:
            entries = sorted((e.name, _kind(e)) for e in scan if prefix + e.name not in hidden)
        marks = {"dir": "/", "link": "@", "file": "", "other": ""}
        shown_entries = [
            name + marks[kind]
            for name, kind in entries
            if not (kind == "dir" and name in PASSED_OVER)
        ]
        # An empty one (the read-only `.git` a workspace that is no repository gets) hides
        # nothing, so it is not mentioned.
        passed = [
            name + "/"
            for name, kind in entries
            if kind == "dir" and name in PASSED_OVER and _holds_anything(top, name)
        ]
    finally:
        os.close(top)
    where = shown(request.path)
    if not shown_entries and not passed:
        return f"{where} is empty"
    lines = shown_entries[:MAX_LISTED]
    if len(shown_entries) > MAX_LISTED:
        lines.append(
            f"... {len(shown_entries) - MAX_LISTED} more entries not shown: use find_files "
            "with a pattern to narrow them"
        )
    if passed:
        lines.append(f"(passed over: {', '.join(passed)})")
    return "\n".join(lines)
