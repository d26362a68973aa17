"""`find_files` and `search_files`: files by a glob, and lines by a regular expression.

Both walk with `walking.Walk` (no link followed, build and dependency directories passed
over) and answer paths from the workspace's root. A search reads only regular files with
one link, skips binary ones, and says when it stopped early. Each takes the paths it may
not show (`hidden`, `bastion.sandbox.hiding`); `find_candidates` and `search_candidates`
are the paths each would show, for the policy to judge first.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Final

from bastion.proto.toolinput import FindFilesInput, SearchFilesInput
from bastion.sandbox.globbing import compile_glob
from bastion.sandbox.numbering import looks_binary
from bastion.sandbox.walking import MAX_WALKED, Walk, open_directory, shown_root
from bastion.shared.errors import InvalidInput

__all__ = [
    "MAX_FOUND",
    "MAX_MATCHES",
    "find_candidates",
    "find_files",
    "search_candidates",
    "search_files",
]

MAX_FOUND: Final = 500
MAX_MATCHES: Final = 200
MAX_SEARCHED_BYTES: Final = 4 * 1024 * 1024
"""A larger file is not searched (and the reply says how many were left out)."""
_LINE_CHARS: Final = 300
_REPLY_CHARS: Final = 200_000


def _walk_note(walk: Walk) -> list[str]:
    if not walk.cut:
        return []
    return [f"(the walk stopped after {MAX_WALKED} entries: give a narrower path)"]


def _found(workspace: Path, request: FindFilesInput) -> tuple[list[str], Walk]:
    matcher = compile_glob(request.pattern)
    prefix = shown_root(request.path)
    top = open_directory(workspace, request.path)
    try:
        walk = Walk(top)
        found = sorted(
            prefix + entry.path
            for entry in walk
            if entry.kind in ("file", "link") and matcher.match(entry.path)
        )
    finally:
        os.close(top)
    return found, walk


def find_candidates(workspace: Path, request: FindFilesInput) -> list[str]:
    """Every path `find_files` would answer, before any is hidden."""
    return _found(workspace, request)[0]


def find_files(
    workspace: Path, request: FindFilesInput, hidden: frozenset[str] = frozenset()
) -> str:
    """Files (and links, never followed) under `path` whose path matches the glob, sorted;
    none of `hidden`."""
    everything, walk = _found(workspace, request)
    found = [path for path in everything if path not in hidden]
    if not found:
        return "\n".join([f"no files match {request.pattern}", *_walk_note(walk)])
    lines = found[:MAX_FOUND]
    if len(found) > MAX_FOUND:
        lines.append(
            f"... and {len(found) - MAX_FOUND} more: only the first {MAX_FOUND} are shown; "
            "give a narrower pattern or path"
        )
    return "\n".join(lines + _walk_note(walk))


def _regex(request: SearchFilesInput) -> re.Pattern[str]:
    flags = re.IGNORECASE if request.case_insensitive else 0
    try:
        return re.compile(request.pattern, flags)
    except re.error as error:
        raise InvalidInput(
            f"the pattern is not a valid regular expression ({error.msg} at position "
            f"{error.pos}): fix it, or escape characters such as ( [ . * with a backslash"
        ) from None


def _text_of(parent: int, name: str) -> str | None:
    """The text of a regular, singly linked, not binary file, or None to pass it over."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=parent
        )
    except OSError:
        return None
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            return None
        if info.st_size > MAX_SEARCHED_BYTES:
            return None
        data = stream.read(MAX_SEARCHED_BYTES)
    if looks_binary(data[:8192]):
        return None
    return data.decode("utf-8", errors="replace")


def _cut(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS] + " [...]"


def _shown_matches(path: str, lines: list[str], hits: list[int], context: int) -> list[str]:
    """`path:line: text` for each hit, `path-line- text` around it, `--` between groups."""
    out: list[str] = []
    shown_until = -1
    hit_set = set(hits)
    for hit in hits:
        first = max(0, hit - context, shown_until + 1)
        if out and first > shown_until + 1:
            out.append("--")
        for index in range(first, min(len(lines), hit + context + 1)):
            if index <= shown_until:
                continue
            mark = ":" if index in hit_set else "-"
            out.append(f"{path}{mark}{index + 1}{mark} {_cut(lines[index])}")
            shown_until = index
    return out


def search_candidates(workspace: Path, request: SearchFilesInput) -> list[str]:
    """The path of each file `search_files` would show lines of, before any is hidden."""
    regex = _regex(request)
    only = compile_glob(request.glob) if request.glob else None
    prefix = shown_root(request.path)
    found: list[str] = []
    top = open_directory(workspace, request.path)
    try:
        for entry in Walk(top):
            if entry.kind != "file" or (only is not None and not only.match(entry.path)):
                continue
            text = _text_of(entry.parent, entry.name)
            if text is not None and any(regex.search(line) for line in text.splitlines()):
                found.append(prefix + entry.path)
    finally:
        os.close(top)
    return found


def search_files(
    workspace: Path, request: SearchFilesInput, hidden: frozenset[str] = frozenset()
) -> str:
    """Lines matching the regular expression, with `context` lines around each match; no
    line of a file in `hidden`."""
    regex = _regex(request)
    only = compile_glob(request.glob) if request.glob else None
    prefix = shown_root(request.path)
    out: list[str] = []
    matches = 0
    size = 0
    cut = False
    top = open_directory(workspace, request.path)
    try:
        walk = Walk(top)
        for entry in walk:
            if entry.kind != "file" or (only is not None and not only.match(entry.path)):
                continue
            if prefix + entry.path in hidden:
                continue
            text = _text_of(entry.parent, entry.name)
            if text is None:
                continue
            lines = text.splitlines()
            hits = [i for i, line in enumerate(lines) if regex.search(line)]
            if not hits:
                continue
            if matches + len(hits) > MAX_MATCHES or size > _REPLY_CHARS:
                hits = hits[: max(0, MAX_MATCHES - matches)]
                cut = True
            if out and hits:
                out.append("--")
            shown_lines = _shown_matches(prefix + entry.path, lines, hits, request.context)
            out += shown_lines
            size += sum(len(line) + 1 for line in shown_lines)
            matches += len(hits)
            if cut:
                break
    finally:
        os.close(top)
    if not matches:
        return "\n".join([f"no lines match {request.pattern}", *_walk_note(walk)])
    if cut:
        out.append(
            f"... the search stopped after {matches} matching lines: give a narrower pattern, "
            "path or glob to see the rest"
        )
    return "\n".join(out + _walk_note(walk))
