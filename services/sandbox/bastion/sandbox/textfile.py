"""A workspace text file as the code-changing tools see it: read confined, newlines, nearest lines.

The tools that change a file (`edit_file`, `apply_patch`) read it here: walked like
`read_file` (no link out of the workspace), refused when it has more than one hard link
(its other name may be outside, and a patch must not read what it cannot write), when it
is binary or not UTF-8. Matching works on text with `\\n` newlines; the file's own style
(`\\r\\n` or `\\n`) is put back when it is written. The nearest lines a miss quotes are
cut of the tenant's values before they are numbered, shortened, and the sentence cut to
fit an error reply (`bastion.shared.linecuts`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rapidfuzz import fuzz, process

from bastion.sandbox.files import open_for_reading
from bastion.sandbox.numbering import looks_binary
from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput
from bastion.shared.linecuts import Line, around, cut_lines
from bastion.shared.redaction import Redactor

__all__ = [
    "MAX_EDIT_BYTES",
    "TextFile",
    "nearest_lines",
    "not_found_sentence",
    "read_text",
    "short",
    "with_newlines",
]

MAX_EDIT_BYTES: Final = 8 * 1024 * 1024
"""A larger file is changed with a command, not by these tools."""
_SHOWN_LINES: Final = 30
_VOTING_LINES: Final = 12
_SCORED_CHARS: Final = 200
_COMPARISONS: Final = 1_000_000
_CANDIDATES: Final = 64
_SIMILAR: Final = 60.0
"""The least similarity (of 100) for a file line to count as like a wanted one."""
_SHOWN_LINE_CHARS: Final = 160
_MESSAGE_CHARS: Final = 3800
"""An error's sentence travels in an `ErrorReply`, which holds at most 4096 characters."""


@dataclass(frozen=True)
class TextFile:
    """A file's text with `\\n` newlines, the newline it uses, and its permission bits."""

    text: str
    newline: str
    mode: int


def short(message: str) -> str:
    """A sentence cut to fit an error reply, marked where it was cut."""
    if len(message) <= _MESSAGE_CHARS:
        return message
    return message[: _MESSAGE_CHARS - 20] + "\n[... cut ...]"


def with_newlines(text: str, newline: str) -> str:
    """`text` (with `\\n` newlines) written in a file's newline style."""
    return text if newline == "\n" else text.replace("\n", newline)


def _newline_of(raw: str) -> str:
    crlf = raw.count("\r\n")
    return "\r\n" if crlf and crlf * 2 >= raw.count("\n") else "\n"


def read_text(workspace: Path, path: str) -> TextFile:
    """The text of an existing workspace file the code-changing tools may rewrite."""
    fd, _ = open_for_reading(workspace, path)
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(fd)
        if info.st_nlink > 1:
            raise InvalidInput(
                f"{shown(path)} has {info.st_nlink} hard links and may be shared with a file "
                "outside the workspace: copy it to a file of its own first"
            )
        if info.st_size > MAX_EDIT_BYTES:
            raise InvalidInput(
                f"{shown(path)} is {info.st_size} bytes, more than the {MAX_EDIT_BYTES} these "
                "tools change: change it with a command instead"
            )
        data = stream.read(MAX_EDIT_BYTES + 1)
    if looks_binary(data[:8192]):
        raise InvalidInput(f"{shown(path)} holds binary data, not text: change it with a command")
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            f"{shown(path)} is not UTF-8 text: change it with a command instead"
        ) from None
    newline = _newline_of(raw)
    return TextFile(
        text=raw.replace("\r\n", "\n") if newline == "\r\n" else raw,
        newline=newline,
        mode=stat.S_IMODE(info.st_mode),
    )


def _best_window(lines: list[str], wanted: list[str]) -> tuple[int, float] | None:
    """Where a window of `len(wanted)` lines looks most like `wanted`, and how much.

    Each of the first wanted lines votes, by similarity (rapidfuzz's normalized Indel
    ratio, the measure difflib's `ratio` approximates, computed in C), for the window start
    that would put one of its `_CANDIDATES` most similar file lines in its place. Bounded
    work: lines are compared by their first `_SCORED_CHARS` characters, and at most
    `_COMPARISONS` line pairs in all (a long file gets fewer voting lines, at least one).
    """
    votes: dict[int, float] = {}
    voting = max(1, min(_VOTING_LINES, _COMPARISONS // max(1, len(lines))))
    used = [(j, w.strip()[:_SCORED_CHARS]) for j, w in enumerate(wanted) if w.strip()]
    used = used[:voting]
    candidates = [line.strip()[:_SCORED_CHARS] for line in lines]
    for j, line in used:
        for _, score, i in process.extract(
            line, candidates, scorer=fuzz.ratio, score_cutoff=_SIMILAR, limit=_CANDIDATES
        ):
            start = max(0, i - j)
            votes[start] = votes.get(start, 0.0) + score / 100
    if not votes:
        return None
    start = max(votes, key=lambda s: (votes[s], -s))
    return start, votes[start] / max(1, len(used))


def nearest_lines(
    lines: list[str], wanted: list[str], redactor: Redactor | None = None
) -> str | None:
    """The file's lines most like `wanted`, numbered as `read_file` numbers them, cut of
    `redactor`'s values before they are numbered and shortened; or None."""
    found = _best_window(lines, wanted)
    if found is None:
        return None
    start, _ = found
    end = min(len(lines), start + max(1, len(wanted)), start + _SHOWN_LINES)
    before, after = around(lines, start, end, redactor.longest if redactor else 0)
    cut = cut_lines(redactor, [Line(line) for line in lines[start:end]], before, after)
    shown_lines = []
    for number, line in enumerate(cut, start + 1):
        text = line if len(line) <= _SHOWN_LINE_CHARS else line[:_SHOWN_LINE_CHARS] + " [...]"
        shown_lines.append(f"{number:6d}\t{text}")
    return "\n".join(shown_lines)


def not_found_sentence(
    missing: str, lines: list[str], wanted: list[str], redactor: Redactor | None = None
) -> str:
    """`missing` (a clause: what is not there), then the file's lines nearest to `wanted`
    so that the next try can quote them, cut of `redactor`'s values before the sentence is
    shortened."""
    nearest = nearest_lines(lines, wanted, redactor)
    if nearest is None:
        return short(
            f"{missing}, and no line of the file looks like it: read the file with read_file "
            "and quote its lines exactly"
        )
    return short(
        f"{missing}; the nearest lines of the file are:\n{nearest}\n"
        "quote them exactly as they are (without the line numbers) and try again"
    )
