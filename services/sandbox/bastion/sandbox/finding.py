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
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bastion.proto.toolinput import FindFilesInput, SearchFilesInput
from bastion.sandbox.globbing import compile_glob
from bastion.sandbox.numbering import looks_binary
from bastion.sandbox.walking import MAX_WALKED, Walk, open_directory, shown_root
from bastion.shared.errors import InvalidInput
from bastion.shared.linecuts import Line, around, cut_lines
from bastion.shared.redaction import Redactor

__all__ = [
    "MAX_FOUND",
    "MAX_MATCHES",
    "Search",
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


@dataclass(frozen=True)
class _Shown:
    """Consecutive lines of one file a search shows (from index `first`), each marked a
    hit or context, with the text just before and after them (only looked at)."""

    path: str
    first: int
    lines: tuple[Line, ...]
    hits: tuple[bool, ...]
    before: str
    after: str


@dataclass(frozen=True)
class Search:
    """What `search_files` found, in order: shown lines and lines said as they are (the
    `--` between groups, notes). `text` is the answer, cut of a redactor's values before
    its lines are prefixed and shortened (done where the redactor is: the search runs in
    a worker process)."""

    parts: tuple[_Shown | str, ...]

    def text(self, redactor: Redactor | None) -> str:
        """The answer: `path:line: text` for each hit, `path-line- text` around it."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            cut = cut_lines(redactor, part.lines, part.before, part.after)
            for index, (line, text, hit) in enumerate(zip(part.lines, cut, part.hits, strict=True)):
                mark = ":" if hit else "-"
                shortened = line.end is not None or len(text) > _LINE_CHARS
                shown = text[:_LINE_CHARS] + " [...]" if shortened else text
                out.append(f"{part.path}{mark}{part.first + index + 1}{mark} {shown}")
        return "\n".join(out)


def _line(text: str, hold: int) -> Line:
    """A line as a search keeps it: at most `_LINE_CHARS` and twice `hold` characters, and
    its last `hold` when it is longer."""
    keep = _LINE_CHARS + 2 * hold
    return Line(text) if len(text) <= keep else Line(text[:keep], text[-hold:] if hold else "")


def _shown_matches(
    path: str, lines: list[str], hits: list[int], context: int, hold: int
) -> list[_Shown | str]:
    """The groups of lines shown for `hits`, `context` lines around each, `--` between."""
    out: list[_Shown | str] = []
    shown_until = -1
    hit_set = set(hits)
    group: list[int] = []

    def close() -> None:
        if group:
            before, after = around(lines, group[0], group[-1] + 1, hold)
            shown = tuple(_line(lines[index], hold) for index in group)
            marks = tuple(index in hit_set for index in group)
            out.append(_Shown(path, group[0], shown, marks, before, after))
            group.clear()

    for hit in hits:
        first = max(0, hit - context, shown_until + 1)
        if (out or group) and first > shown_until + 1:
            close()
            out.append("--")
        for index in range(first, min(len(lines), hit + context + 1)):
            if index <= shown_until:
                continue
            group.append(index)
            shown_until = index
    close()
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
    workspace: Path,
    request: SearchFilesInput,
    hidden: frozenset[str] = frozenset(),
    hold: int = 0,
) -> Search:
    """Lines matching the regular expression, with `context` lines around each match; no
    line of a file in `hidden`. Each line is kept with room for `hold` characters (a
    redactor's `longest`) past what is shown, and as much of the text around, to be cut
    before it is shortened (`Search.text`)."""
    regex = _regex(request)
    only = compile_glob(request.glob) if request.glob else None
    prefix = shown_root(request.path)
    out: list[_Shown | str] = []
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
            shown = _shown_matches(prefix + entry.path, lines, hits, request.context, hold)
            out += shown
            size += sum(_size(part) for part in shown)
            matches += len(hits)
            if cut:
                break
    finally:
        os.close(top)
    if not matches:
        return Search((f"no lines match {request.pattern}", *_walk_note(walk)))
    if cut:
        out.append(
            f"... the search stopped after {matches} matching lines: give a narrower pattern, "
            "path or glob to see the rest"
        )
    return Search((*out, *_walk_note(walk)))


def _size(part: _Shown | str) -> int:
    """About how many characters a part of a search's answer takes."""
    if isinstance(part, str):
        return len(part) + 1
    prefix = len(part.path) + 10
    return sum(prefix + min(len(line.text), _LINE_CHARS) for line in part.lines)
