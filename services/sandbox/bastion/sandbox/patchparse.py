"""Reading a patch, in either form the agent may write, into one list of file changes.

Two forms are accepted:
- a unified diff (`---`/`+++` headers, `@@ -a,b +c,d @@` hunks; git's `a/` and `b/`
  prefixes; `/dev/null` for a file added or deleted; git's `rename from`/`rename to`);
- the `*** Begin Patch` form (`*** Add File:`, `*** Update File:` with an optional
  `*** Move to:`, `*** Delete File:`, hunks after `@@` or `@@ <anchor line>`, `*** End Patch`).

Line numbers are kept only as a hint: hunks are found by their lines (see `patchfit`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

from bastion.shared.errors import InvalidInput

__all__ = ["FileChange", "Hunk", "parse_patch"]

_HUNK_HEADER: Final = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    """One change: the lines it expects (`old`) and what replaces them (`new`)."""

    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    line: int | None = None
    """Where the patch says `old` starts (1-based), a hint only."""
    anchors: list[str] = field(default_factory=list)
    """Lines to find first, in order; the hunk is looked for after the last of them."""
    old_no_newline: bool = False
    new_no_newline: bool = False
    at_end: bool = False
    sources: list[int | None] = field(default_factory=list)
    """For each new line, the index in `old` of the context line it repeats, or None."""
    last_mark: str = ""
    old_count: int | None = None
    new_count: int | None = None

    def counted(self) -> bool:
        """Whether the header's line counts are reached (always, without counts)."""
        return (self.old_count is None or len(self.old) >= self.old_count) and (
            self.new_count is None or len(self.new) >= self.new_count
        )


@dataclass
class FileChange:
    """What a patch does to one file."""

    action: Literal["add", "update", "delete"]
    path: str
    move_to: str | None = None
    hunks: list[Hunk] = field(default_factory=list)


def parse_patch(patch: str) -> list[FileChange]:
    """The file changes of `patch`, or an `InvalidInput` saying which line is not understood."""
    lines = patch.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    first = next((line.strip() for line in lines if line.strip()), "")
    changes = _begin_patch(lines) if first == "*** Begin Patch" else _unified(lines)
    if not changes:
        raise InvalidInput(
            "the patch changes no file: give a unified diff (--- a/path, +++ b/path, @@ hunks) "
            "or a *** Begin Patch ... *** End Patch patch"
        )
    return changes


def _body_line(hunk: Hunk, line: str) -> bool:
    """Add one hunk line (` `, `-`, `+`, `\\`) to `hunk`; False if it is not one."""
    if line.startswith("\\"):
        # "\ No newline at end of file" says so of the line just before it.
        hunk.old_no_newline |= hunk.last_mark in (" ", "-")
        hunk.new_no_newline |= hunk.last_mark in (" ", "+")
        return True
    mark, text = (line[0], line[1:]) if line else (" ", "")
    if mark == " ":
        hunk.sources.append(len(hunk.old))
        hunk.old.append(text)
        hunk.new.append(text)
    elif mark == "-":
        hunk.old.append(text)
    elif mark == "+":
        hunk.sources.append(None)
        hunk.new.append(text)
    else:
        return False
    hunk.last_mark = mark
    return True


def _not_understood(number: int, line: str, form: str) -> InvalidInput:
    return InvalidInput(
        f"line {number} of the patch is not part of a {form}: {line[:120]!r}; every hunk "
        "line starts with a space, - or +"
    )


# --- *** Begin Patch ----------------------------------------------------------------------


_FILE_HEADER: Final = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$")
_ACTIONS: Final[dict[str, Literal["add", "update", "delete"]]] = {
    "Add": "add",
    "Update": "update",
    "Delete": "delete",
}


def _at_line(change: FileChange, hunk: Hunk | None, line: str) -> Hunk:
    """The hunk an `@@` line opens (or, right after another `@@`, adds an anchor to)."""
    anchor = line[2:].strip()
    numbers = _HUNK_HEADER.match(line)
    if numbers:  # a unified hunk header here: its line number is a hint, not an anchor
        hunk = Hunk(line=int(numbers[1]))
    elif hunk is not None and not hunk.old and not hunk.new:
        hunk.anchors += [anchor] if anchor else []  # `@@ class A` then `@@ def f`
        return hunk
    else:
        hunk = Hunk(anchors=[anchor] if anchor else [])
    change.hunks.append(hunk)
    return hunk


def _begin_patch(lines: list[str]) -> list[FileChange]:
    changes: list[FileChange] = []
    current: FileChange | None = None
    hunk: Hunk | None = None
    form = "*** Begin Patch patch"
    for number, line in enumerate(lines, 1):
        header = _FILE_HEADER.match(line)
        if line.startswith("*** End Patch"):
            return [c for c in changes if c.hunks or c.action != "update" or c.move_to]
        if header:
            current = FileChange(action=_ACTIONS[header[1]], path=header[2].strip())
            changes.append(current)
            hunk = Hunk() if current.action == "add" else None
            current.hunks += [hunk] if hunk is not None else []
        elif current is None:
            if line.strip() not in ("*** Begin Patch", ""):
                raise _not_understood(number, line, form)
        elif line.startswith("*** End of File"):
            if hunk is not None:
                hunk.at_end = True
        elif line.startswith("*** Move to: ") and current.action == "update":
            current.move_to = line[len("*** Move to: ") :].strip()
        elif current.action == "delete":
            if line.strip():
                raise _not_understood(number, line, form)
        elif current.action == "add":
            if not line.startswith("+"):
                raise _not_understood(number, line, "*** Add File section (each line starts +)")
            assert hunk is not None
            hunk.new.append(line[1:])
        elif line.startswith("@@"):
            hunk = _at_line(current, hunk, line)
        else:
            if hunk is None:
                hunk = Hunk()
                current.hunks.append(hunk)
            if not _body_line(hunk, line):
                raise _not_understood(number, line, form)
    raise InvalidInput("the patch has no *** End Patch line: end it with one")


# --- unified diff ----------------------------------------------------------------------


def _header_path(text: str) -> str | None:
    """The path of a `---`/`+++` header, without a timestamp; None for /dev/null."""
    path = text.split("\t", 1)[0].strip()
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1]
    return None if path == "/dev/null" else path


def _strip_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """Drop git's `a/` and `b/` when the headers use them (both, or one beside /dev/null)."""
    git_old = old is None or old.startswith("a/")
    git_new = new is None or new.startswith("b/")
    if git_old and git_new:
        return (old[2:] if old else None), (new[2:] if new else None)
    return old, new


def _file_header(old: str | None, new: str | None, number: int) -> FileChange:
    if old is None and new is None:
        raise InvalidInput(f"line {number} of the patch names /dev/null on both sides")
    if old is None:
        assert new is not None
        return FileChange(action="add", path=new)
    if new is None:
        return FileChange(action="delete", path=old)
    return FileChange(action="update", path=old, move_to=new if new != old else None)


def _hunk_header(match: re.Match[str], current: FileChange | None, number: int) -> Hunk:
    if current is None:
        raise InvalidInput(
            f"line {number} of the patch starts a hunk before any ---/+++ file header: "
            "name the file first"
        )
    old_count = 1 if match[2] is None else int(match[2])
    hunk = Hunk(
        line=int(match[1]) + (1 if old_count == 0 else 0),  # `-5,0`: after line 5
        old_count=old_count,
        new_count=1 if match[4] is None else int(match[4]),
    )
    current.hunks.append(hunk)
    return hunk


def _unified(lines: list[str]) -> list[FileChange]:
    changes: list[FileChange] = []
    current: FileChange | None = None
    hunk: Hunk | None = None
    renamed: FileChange | None = None
    rename: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        number = index + 1
        index += 1
        if hunk is not None and not hunk.counted() and _body_line(hunk, line):
            continue  # within the header's counts, `--- x` is a removed line `-- x`
        match = _HUNK_HEADER.match(line)
        if line.startswith("--- ") and index < len(lines) and lines[index].startswith("+++ "):
            old, new = _strip_prefixes(_header_path(line[4:]), _header_path(lines[index][4:]))
            index += 1
            current, hunk = _file_header(old, new, number), None
            if renamed is not None and (renamed.path, renamed.move_to) == (old, new):
                current = renamed  # git's rename lines, then the same file's hunks
            else:
                changes.append(current)
        elif line.startswith("diff "):
            current, hunk, renamed, rename = None, None, None, {}
        elif line.startswith(("rename from ", "rename to ")):
            key, _, value = line.partition(" ")[2].partition(" ")
            rename[key] = value.strip()
            if "from" in rename and "to" in rename:
                renamed = FileChange(action="update", path=rename["from"], move_to=rename["to"])
                changes.append(renamed)
        elif match:
            hunk = _hunk_header(match, current, number)
        elif hunk is not None and (line or not hunk.counted()) and _body_line(hunk, line):
            continue
        elif hunk is not None and current is not None and line:
            raise _not_understood(number, line, "unified diff")
        # else: git's index and mode lines, a commit message, text between files
    return changes
