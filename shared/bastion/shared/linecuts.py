"""Cutting secrets out of text before it is shown line by line, shortened, or left out of.

A tool that shows a file's lines with something before each (`read_file`'s numbers,
`search_files`' `path:N:`) puts text between the lines of a value broken across them (a
PEM key, `fold`, base64 wrapped at 76 columns): cut afterwards, no stretch of the reply is
the form any more. A tool that shortens a line, or keeps only a text's head and tail,
shows a piece of a value that no longer matches as a whole. So the text is cut first:

- `cut_lines`: consecutive lines cut as the text they make, a value across lines cut on
  each line it covers (`[secret NAME]` on each, so every line keeps its number); a line
  given only in part (`Line.end`) is cut as a text that goes on (`shown_start`, with the
  line before it), and the lines after it are cut with its end before them;
- `shown_start`: the start of a text that goes on past what is given, cut (what could
  begin a value is held back, `bastion.shared.streamcuts`), then shortened;
- `cut_around_gaps`: a text with stretches left out of it (each where `gap` matches),
  cut with what is beside each gap dropped (`HeldCuts.gap`).

What is shortened is then a cut text: a `[secret NAME]` may lose its end, never a value.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bastion.shared.redaction import Redactor, cut_spans, merged
from bastion.shared.streamcuts import HeldCuts

__all__ = ["Line", "around", "cut_around_gaps", "cut_lines", "shown_start"]


@dataclass(frozen=True)
class Line:
    """One line of a text (without its line break): all of it, or, when it goes on past
    what is kept (`end` set), its start and its last characters (at least the redactor's
    `longest`), for the lines after it."""

    text: str
    end: str | None = None


def shown_start(redactor: Redactor | None, text: str, chars: int) -> str:
    """At most `chars` characters of the start of a text (`text`, of which more follows
    that is not given), every value cut out: what could be the start of a value running
    on past `text` is not shown."""
    if not redactor:
        return text[:chars]
    return _cut_start(redactor, text, "")[:chars]


def _cut_start(redactor: Redactor, text: str, before: str) -> str:
    """`text` less its last `longest - 1` characters (where a value running on past it
    could start: a stretch spans at most `longest`), cut as the text it is in with
    `before` (a line break between) and what follows it in `text`."""
    kept = max(0, len(text) - max(0, redactor.longest - 1))
    return _cut_whole(redactor, [text[:kept]], _ended(before), text[kept:])[0]


def _cut_whole(redactor: Redactor, lines: Sequence[str], before: str, after: str) -> list[str]:
    """Whole consecutive lines cut as the text they make with `before` (ending in a line
    break) before them and `after` (starting with one) after: not shown, only looked at."""
    text = before + "\n".join(lines) + after
    spans = redactor.spans(text)
    if not spans:  # most text holds no value: nothing to place line by line
        return list(lines)
    starts: list[int] = []
    at = len(before)
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    local: dict[int, list[tuple[int, int, str]]] = {}
    for start, end, name in merged(spans):
        index = max(0, bisect.bisect_right(starts, start) - 1)
        while index < len(lines) and starts[index] < end:
            first, last = starts[index], starts[index] + len(lines[index])
            if start <= last and end > first:  # the stretch covers some of this line
                local.setdefault(index, []).append(
                    (max(start, first) - first, min(end, last) - first, name)
                )
            index += 1
    return [cut_spans(line, local.get(i, [])) for i, line in enumerate(lines)]


def cut_lines(
    redactor: Redactor | None, lines: Sequence[Line], before: str = "", after: str = ""
) -> list[str]:
    """Each of consecutive `lines` with every value cut out, `before` and `after` the text
    just before and after them (without the line breaks between: only looked at). A line
    given in part is `shown_start` of it (its caller shortens it further)."""
    if not redactor:
        return [line.text for line in lines]
    out: list[str] = []
    run: list[str] = []
    ahead = before
    for line in lines:
        if line.end is None:
            run.append(line.text)
            continue
        out += _cut_whole(redactor, run, _ended(ahead), "\n" + line.text) if run else []
        out.append(_cut_start(redactor, line.text, run[-1] if run else ahead))
        run = []
        ahead = line.end
    if run:
        out += _cut_whole(redactor, run, _ended(ahead), "\n" + after if after else "")
    return out


def around(lines: Sequence[str], first: int, end: int, chars: int) -> tuple[str, str]:
    """The text just before line `first` of `lines` and just after line `end - 1`, for
    `cut_lines`: `chars` characters each (a redactor's `longest`), or less at the ends."""
    before: list[str] = []
    index, size = first - 1, 0
    while index >= 0 and size < chars:
        before.insert(0, lines[index][-chars:])
        size += len(before[0]) + 1
        index -= 1
    after: list[str] = []
    index, size = end, 0
    while index < len(lines) and size < chars:
        after.append(lines[index][:chars])
        size += len(after[-1]) + 1
        index += 1
    return "\n".join(before), "\n".join(after)


def _ended(text: str) -> str:
    return text + "\n" if text else ""


def cut_around_gaps(redactor: Redactor | None, text: str, gap: re.Pattern[str]) -> str:
    """`text` with every value cut out, where each match of `gap` says text was left out:
    what was just before and just after it is dropped as far as it could be part of a
    value the gap holds the rest of (`HeldCuts.gap`)."""
    if not redactor:
        return text
    held = HeldCuts(redactor)
    out: list[str] = []
    at = 0
    for found in gap.finditer(text):
        out.append(held.take(text[at : found.start()]))
        held.gap()
        out.append(found.group())
        at = found.end()
    out.append(held.take(text[at:]))
    out.append(held.end())
    return "".join(out)
