"""How `read_file` shows a file: its lines numbered from `offset`, at most `limit` of them.

A line longer than `MAX_LINE_CHARS` characters is shown cut, with a note; the answer stops
once it holds `MAX_READ_CHARS`, saying where to read on; a file that looks binary is
refused. `numbered` reads a stream line by line (at most `_ROOM` bytes of a line are ever
held, however long it is); `numbered_whole` answers the very same text for a file read
whole into memory, splitting it at once and formatting the lines shown in one pass when
they are plain (valid UTF-8 without carriage returns, none near a cut, all within the
answer's bound), line by line as `numbered` does otherwise.

Given a redactor, the lines are cut of the tenant's values before they are numbered and
shortened (`bastion.shared.linecuts`): a value across lines (a PEM key, `fold`) is cut on
each line it covers, and a long line is cut whole, or as far as it is read, before it is
shortened, so its shown start never holds a piece of a value. A file read whole is cut
whole (a value across the lines before `offset` is cut on the lines shown); one read line
by line keeps `_ROOM` bytes and four times the redactor's `longest` more of each line.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import BinaryIO, Final

from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput
from bastion.shared.linecuts import Line, cut_lines
from bastion.shared.redaction import Redactor

__all__ = ["MAX_LINE_CHARS", "MAX_READ_CHARS", "looks_binary", "numbered", "numbered_whole"]

MAX_LINE_CHARS: Final = 2000
"""A longer line is shown cut, with a note."""
MAX_READ_CHARS: Final = 256 * 1024
"""A read answers at most this much text (NATS carries 1 MiB a message by default)."""
_PROBE_BYTES: Final = 8192
_ROOM: Final = MAX_LINE_CHARS * 4
"""The most bytes of one line read at a time: `MAX_LINE_CHARS` characters of UTF-8."""


def looks_binary(probe: bytes) -> bool:
    """Whether the start of a file (`probe`) holds a NUL or bytes that are not UTF-8."""
    if b"\0" in probe:
        return True
    try:
        probe.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start < len(probe) - 3  # a character cut by the probe's end is fine
    return False


def _refuse_binary(probe: bytes, path: str) -> None:
    if looks_binary(probe):
        raise InvalidInput(
            f"{shown(path)} holds binary data, not text: look at it with a command instead "
            "(e.g. `xxd`, `file`)"
        )


def _lines(stream: BinaryIO, room: int = _ROOM) -> Iterator[tuple[bytes, bytes | None]]:
    """Each line's start (at most `room` bytes) and, when it went on past that, its last
    bytes (at least `room` of them, or all the rest)."""
    while chunk := stream.readline(room):
        end: bytes | None = None
        tail = chunk
        while not tail.endswith(b"\n"):
            last, tail = tail, stream.readline(room)
            if not tail:
                break
            end = last + tail if end is None or len(tail) < room else tail
        yield chunk, end


def _shown_line(number: int, chunk: bytes, longer: bool) -> str:
    """Line `number` as shown, from its first `_ROOM` bytes (`chunk`)."""
    text = chunk.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8", errors="replace")
    if longer or len(text) > MAX_LINE_CHARS:
        text = f"{text[:MAX_LINE_CHARS]} [... line cut at {MAX_LINE_CHARS} characters]"
    return f"{number:6d}\t{text}"


def _ending(out: list[str], path: str, offset: int, total: int, next_line: int) -> str:
    """The answer of `out` (the lines shown), the file having `total` lines, or why none;
    with where to read on from (`next_line`, 0: nowhere)."""
    if total == 0:
        return f"{shown(path)} is empty"
    if offset > total:
        raise InvalidInput(
            f"{shown(path)} has {total} lines, so offset {offset} is past its end: give an "
            f"offset from 1 to {total}"
        )
    if next_line:
        out.append(f"... {total - next_line + 1} more lines: read on with offset={next_line}")
    return "\n".join(out)


def numbered(
    stream: BinaryIO, path: str, offset: int, limit: int, redactor: Redactor | None = None
) -> str:
    """Lines `offset`.. of `stream`, numbered, at most `limit` of them and `MAX_READ_CHARS`,
    cut of `redactor`'s values first."""
    _refuse_binary(stream.read(_PROBE_BYTES), path)
    stream.seek(0)
    if redactor:
        return _numbered_cut(stream, path, offset, limit, redactor)
    out: list[str] = []
    size = 0
    total = 0
    next_line = 0
    for number, (raw, end) in enumerate(_lines(stream), 1):
        longer = end is not None
        total = number
        if number < offset or next_line:
            continue
        if len(out) >= limit or size >= MAX_READ_CHARS:
            next_line = number
            continue
        line = _shown_line(number, raw, longer)
        out.append(line)
        size += len(line) + 1
    return _ending(out, path, offset, total, next_line)


def _plain(wanted: list[bytes], offset: int) -> list[str] | None:
    """The lines `wanted` (from line `offset`) as shown, formatted in one pass, when none
    is cut, none ends in a carriage return and the answer's bound is not reached; else
    None."""
    if not wanted:
        return []
    if max(map(len, wanted)) > MAX_LINE_CHARS:
        return None
    joined = b"\n".join(wanted)
    if b"\r" in joined:
        return None
    try:
        text = joined.decode("utf-8")
    except UnicodeDecodeError:
        return None
    width = max(6, len(str(offset + len(wanted))))
    if len(text) + len(wanted) * (width + 2) >= MAX_READ_CHARS:
        return None
    return [f"{number:6d}\t{line}" for number, line in enumerate(text.split("\n"), offset)]


def numbered_whole(
    data: bytes, path: str, offset: int, limit: int, redactor: Redactor | None = None
) -> str:
    """`numbered` of a file read whole into `data`: the same text, or the same error."""
    _refuse_binary(data[:_PROBE_BYTES], path)
    if redactor:
        texts = data.decode("utf-8", errors="replace").split("\n")
        if not texts[-1]:
            texts.pop()
        cut = cut_lines(redactor, [Line(text) for text in texts])
        shown_cut = cut[offset - 1 : offset - 1 + limit]
        return _answer(shown_cut, [False] * len(shown_cut), path, offset, len(texts))
    lines = data.split(b"\n")
    closed = not lines[-1]  # the last line ends with a newline (or there is none)
    if closed:
        lines.pop()
    total = len(lines)
    wanted = lines[offset - 1 : offset - 1 + limit]
    out = _plain(wanted, offset)
    if out is not None:
        after = offset + len(wanted)
        return _ending(out, path, offset, total, after if after <= total else 0)
    out = []
    size = 0
    next_line = 0
    for number in range(offset, total + 1):
        if len(out) >= limit or size >= MAX_READ_CHARS:
            next_line = number
            break
        raw = lines[number - 1]
        # As `_lines` reads it: a line that fills `_ROOM` goes on past it if a newline
        # follows (the last line without one ends there).
        longer = len(raw) > _ROOM or (len(raw) == _ROOM and (closed or number < total))
        line = _shown_line(number, raw[:_ROOM], longer)
        out.append(line)
        size += len(line) + 1
    return _ending(out, path, offset, total, next_line)


def _text(raw: bytes) -> str:
    return raw.removesuffix(b"\n").decode("utf-8", errors="replace")


def _numbered_cut(stream: BinaryIO, path: str, offset: int, limit: int, redactor: Redactor) -> str:
    """`numbered`, each line cut of `redactor`'s values before it is numbered and
    shortened: lines read as `_lines` reads them with more room (`redactor.longest` four
    times more bytes), and the text just before and after the lines shown (as much as one
    value's stretch spans) looked at too."""
    room = _ROOM + 4 * redactor.longest
    recent: deque[bytes] = deque()
    """What is read of the last lines before `offset`: at least `room` bytes of them."""
    recent_bytes = 0
    wanted: list[Line] = []
    after: list[str] = []
    after_chars = 0
    size = 0
    total = 0
    for number, (raw, end) in enumerate(_lines(stream, room), 1):
        total = number
        if number < offset:
            recent.append(raw if end is None else end)
            recent_bytes += len(recent[-1])
            while recent_bytes - len(recent[0]) >= room:
                recent_bytes -= len(recent.popleft())
        elif len(wanted) < limit and size < MAX_READ_CHARS:
            wanted.append(Line(_text(raw), None if end is None else _text(end)))
            size += min(len(wanted[-1].text), MAX_LINE_CHARS) + 8
        elif after_chars < redactor.longest:
            after.append(_text(raw))
            after_chars += len(after[-1]) + 1
    before = "\n".join(map(_text, recent))[-redactor.longest :] if recent else ""
    cut = cut_lines(redactor, wanted, before, "\n".join(after))
    return _answer(cut, [line.end is not None for line in wanted], path, offset, total)


def _answer(cut: list[str], longer: list[bool], path: str, offset: int, total: int) -> str:
    """The answer of the cut lines `cut` from line `offset` (`longer`: whether each went
    on past what was read), shortened and numbered, within `MAX_READ_CHARS`."""
    out: list[str] = []
    size = 0
    for number, (line, went_on) in enumerate(zip(cut, longer, strict=True), offset):
        if size >= MAX_READ_CHARS:
            return _ending(out, path, offset, total, number)
        text = line.removesuffix("\r")
        if went_on or len(text) > MAX_LINE_CHARS:
            text = f"{text[:MAX_LINE_CHARS]} [... line cut at {MAX_LINE_CHARS} characters]"
        out.append(f"{number:6d}\t{text}")
        size += len(out[-1]) + 1
    after = offset + len(cut)
    return _ending(out, path, offset, total, after if after <= total else 0)
