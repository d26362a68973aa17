"""Finding where each hunk of a patch goes in a file's text, by its lines, not its numbers.

A hunk's expected lines (context and removed) are looked for three times, each looser than
the one before: exactly, then ignoring trailing whitespace, then ignoring whitespace at
both ends. Where a pass finds several places, the one nearest the line number the patch
gives wins; without a number, the first after the previous hunk (or after the hunk's
`@@` anchors). Places already taken by an earlier hunk of the same file are passed over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bastion.sandbox.patchparse import Hunk
from bastion.sandbox.textfile import not_found_sentence, short
from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput
from bastion.shared.redaction import Redactor

__all__ = ["added_text", "fit_hunks"]

_PASSES: tuple[Callable[[str], str], ...] = (
    lambda line: line,
    lambda line: line.rstrip(),
    lambda line: line.strip(),
)


def added_text(hunks: Sequence[Hunk]) -> str:
    """The content of a file a patch adds: every hunk's new lines, in order."""
    lines = [line for hunk in hunks for line in hunk.new]
    if not lines:
        return ""
    no_newline = bool(hunks) and hunks[-1].new_no_newline
    return "\n".join(lines) + ("" if no_newline else "\n")


def _places(lines: list[str], old: list[str], norm: Callable[[str], str]) -> list[int]:
    wanted = [norm(line) for line in old]
    size = len(wanted)
    first = wanted[0]
    return [
        i
        for i in range(len(lines) - size + 1)
        if norm(lines[i]) == first and [norm(x) for x in lines[i : i + size]] == wanted
    ]


def _new_lines(hunk: Hunk, found: list[str]) -> list[str]:
    """The hunk's new lines, its context lines as the file has them (a loose match may
    differ from the patch in whitespace)."""
    if len(hunk.sources) != len(hunk.new):
        return hunk.new
    return [
        text if source is None else found[source]
        for text, source in zip(hunk.new, hunk.sources, strict=True)
    ]


def _free(at: int, size: int, taken: list[tuple[int, int]]) -> bool:
    return all(at + size <= start or at >= end for start, end in taken)


def _choose(candidates: list[int], hunk: Hunk, start: int, size: int, total: int) -> int:
    if hunk.at_end and total - size in candidates:
        return total - size
    if hunk.line is not None and not hunk.anchors:
        return min(candidates, key=lambda at: (abs(at - (hunk.line or 1) + 1), at))
    after = [at for at in candidates if at >= start]
    return after[0] if after else candidates[0]


def _anchor(lines: list[str], anchor: str, start: int) -> int | None:
    for norm in _PASSES[1:]:
        for i in range(start, len(lines)):
            if norm(lines[i]) == norm(anchor):
                return i
    return None


def _misfit(path: str, number: int, why: str) -> InvalidInput:
    return InvalidInput(short(f"hunk {number} of {shown(path)} does not fit: {why}"))


def fit_hunks(path: str, text: str, hunks: Sequence[Hunk], redactor: Redactor | None = None) -> str:
    """`text` (with `\\n` newlines) changed by `hunks`, or an error naming the hunk that
    does not fit and showing the file's lines nearest to what it expected (cut of
    `redactor`'s values)."""
    lines = text.split("\n")
    final_newline = text.endswith("\n")
    if final_newline or text == "":
        lines.pop()
    changes: list[tuple[int, int, Hunk]] = []
    taken: list[tuple[int, int]] = []
    cursor = 0
    for number, hunk in enumerate(hunks, 1):
        start = cursor
        for anchor in hunk.anchors:
            found = _anchor(lines, anchor, start)
            if found is None:
                raise _misfit(
                    path,
                    number,
                    not_found_sentence(
                        f"its @@ line {anchor[:120]!r} is not in the file",
                        lines,
                        [anchor],
                        redactor,
                    ),
                )
            start = found + 1
        if not hunk.old:
            if hunk.anchors:
                at = start
            elif hunk.line is not None and not hunk.at_end:
                at = min(max(hunk.line - 1, 0), len(lines))
            else:
                at = len(lines)
        else:
            at = -1
            for norm in _PASSES:
                free = [
                    place
                    for place in _places(lines, hunk.old, norm)
                    if _free(place, len(hunk.old), taken)
                ]
                if free:
                    at = _choose(free, hunk, start, len(hunk.old), len(lines))
                    break
            if at < 0:
                raise _misfit(
                    path,
                    number,
                    not_found_sentence(
                        "the lines it expects are not in the file", lines, hunk.old, redactor
                    ),
                )
        changes.append((at, at + len(hunk.old), hunk))
        taken.append((at, at + len(hunk.old)))
        cursor = at + len(hunk.old)
    for at, end, hunk in sorted(changes, key=lambda c: c[0], reverse=True):
        if end == len(lines) and hunk.old_no_newline != hunk.new_no_newline:
            final_newline = not hunk.new_no_newline
        elif end == len(lines) and not lines[at:end] and hunk.new_no_newline:
            final_newline = False
        lines[at:end] = _new_lines(hunk, lines[at:end])
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if final_newline or not text else "")
