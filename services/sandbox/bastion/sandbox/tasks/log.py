"""A background task's log: its output as the sandbox service keeps it, outside the sandbox
(the command cannot rewrite it), redacted as it comes, read back by byte offsets.

The log keeps the first `head_bytes` of the output, then one marker line, then, once the
task has ended, the last `TAIL_BYTES` of what came after the head. Nothing reaches the file
uncut: output goes through a `HeldCuts` (`bastion.shared.streamcuts`), which holds back
what could be the start of a value's form until the next write or the task's end says
whether it is one, however long the task pauses in between (a pause decides nothing). What
is held lives in memory only: a service killed while it holds text loses it, and never
writes it raw.

Output past the head is not cut as it comes, since most of it is thrown away: its last
`RAW_TAIL_BYTES` are kept raw, in memory only, and cut once, when the task ends. So a flood
past the head costs a pipe read and a copy. When that raw tail has lost its start, it is
cut as text after a gap (`HeldCuts.gap`): what was held, and as many characters at the
tail's start, are dropped, since either could be part of a value whose rest is gone.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import Final

from bastion.shared.redaction import Redactor, cut_spans, out_of_stretches
from bastion.shared.streamcuts import HeldCuts

__all__ = ["RAW_TAIL_BYTES", "TAIL_BYTES", "TaskLog", "read_log", "read_page"]

TAIL_BYTES: Final = 32 * 1024
RAW_TAIL_BYTES: Final = 2 * TAIL_BYTES
"""The raw output past the head kept for the tail: twice the tail, so that after its cut
(a value's form may be longer than its mark) and the characters dropped at its start it
still fills the tail, unless values fill more than half of it."""


class TaskLog:
    """The writer of one task's log file."""

    def __init__(self, path: Path, head_bytes: int, redactor: Redactor | None) -> None:
        self.path = path
        self._head_bytes = head_bytes
        self._cuts = HeldCuts(redactor)
        self._redactor = redactor if redactor else None
        """The values cut as they are now (`recut`)."""
        self._head_end = 0
        """Bytes of the head in the file: where the marker of what is left out starts."""
        self._tail_goes_on = True
        """The tail is what came right after the head: nothing between them left out."""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail = bytearray()
        self._raw = bytearray()
        """Output past the head, uncut (memory only): its last `RAW_TAIL_BYTES`."""
        self._gap = False
        """The raw tail has lost its start."""
        self.size = 0
        """Bytes in the file."""
        self.seen = 0
        """Bytes of output: in the head as redacted, past it as the task wrote them."""
        self.cut = False
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

    @property
    def holds(self) -> int:
        """The most characters of the output held back at a time (0: none, no values to
        cut)."""
        return self._cuts.hold

    def to_cut(self, size: int) -> int:
        """How many characters feeding a chunk of `size` bytes cuts: none past the head."""
        return 0 if self.cut else size + self.holds

    def at_close(self) -> int:
        """How many characters `close` cuts: the held text and the raw tail."""
        return self.holds + len(self._raw)

    def recut(self, redactor: Redactor | None) -> None:
        """Cut what comes from now on, and what is held, with `redactor` (the session's
        values as they are now: one stored or leased since the task started is never
        written raw)."""
        self._cuts.recut(redactor)
        if redactor:
            self._redactor = redactor

    def feed(self, chunk: bytes) -> None:
        """Take a chunk of output; what is decided goes to the log, values cut; past the
        head, the chunk is kept raw for the tail."""
        if self.cut:
            self.seen += len(chunk)
            self._raw += chunk
            if len(self._raw) > RAW_TAIL_BYTES:
                del self._raw[:-RAW_TAIL_BYTES]
                self._gap = True
            return
        self._keep(self._cuts.take(self._decoder.decode(chunk)).encode())

    def close(self) -> None:
        """The task ended: the rest of its output cut (the raw tail after a gap, if it lost
        its start), then the tail past the head written."""
        raw, self._raw = bytes(self._raw), bytearray()
        if self._gap:
            self._cuts.gap()
            self._decoder.reset()
            del self._tail[:]
        text = self._decoder.decode(raw, final=True)
        rest = (self._cuts.take(text) + self._cuts.end()).encode()
        if self.cut:
            self._tail += rest
            self._trim_tail()
            if self._tail_goes_on and not self._gap:  # cut across the marker
                self._cut_across_head_end()
            if self._tail:
                self._write(bytes(self._tail))
        else:
            self._keep(rest)
            if self.cut and self._tail_goes_on:
                self._cut_across_head_end()
            if self.cut and self._tail:
                self._write(bytes(self._tail))
        os.close(self._fd)

    def _keep(self, data: bytes) -> None:
        if not data:
            return
        self.seen += len(data)
        room = self._head_bytes - self.size
        if not self.cut and len(data) <= room:
            self._write(data)
            return
        if not self.cut:
            self._write(data[:room])
            self._head_end = self.size
            data = data[room:]
            self.cut = True
            self._write(
                f"\n[bastion: the output went past {self._head_bytes} bytes; what follows "
                f"is left out, and its last {TAIL_BYTES} bytes are appended when the task "
                "ends]\n".encode()
            )
        self._tail += data
        self._trim_tail()

    def _trim_tail(self) -> None:
        if len(self._tail) > TAIL_BYTES:
            del self._tail[:-TAIL_BYTES]
            self._tail_goes_on = False

    def _cut_across_head_end(self) -> None:
        """The head's end and the tail's start are one stretch of output, the marker of
        what is left out written between them: a value found across them with the values
        known now (one stored after the head was written, which no read could find across
        the marker) has its part in the head masked in place, `*` for each byte, and its
        part in the tail dropped."""
        redactor = self._redactor
        if redactor is None or not self._tail:
            return
        reach = 4 * redactor.longest  # bytes of at most `longest` characters
        start = max(0, self._head_end - reach)
        with self.path.open("rb") as log:
            log.seek(start)
            head = log.read(self._head_end - start).decode(errors="surrogateescape")
        tail = bytes(self._tail[:reach]).decode(errors="surrogateescape")
        across = [(s, e) for s, e, _ in redactor.spans(head + tail) if s < len(head) < e]
        if not across:
            return
        first = min(s for s, _ in across)
        last = max(e for _, e in across) - len(head)
        masked = len(head[first:].encode(errors="surrogateescape"))
        os.pwrite(self._fd, b"*" * masked, self._head_end - masked)
        del self._tail[: len(tail[:last].encode(errors="surrogateescape"))]

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.size += len(data)


def read_log(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes of the log from `offset`, ending on a whole UTF-8 character
    (one character more than `limit` when `limit` is less than the first one), and the
    file's size."""
    try:
        with path.open("rb") as log:
            size = os.fstat(log.fileno()).st_size
            log.seek(offset)
            data = log.read(limit + 3)
    except FileNotFoundError:
        return b"", 0
    return _whole_characters(data, limit), size


def _whole_characters(data: bytes, limit: int) -> bytes:
    """The first `limit` bytes of `data`, ending on a whole UTF-8 character (one character
    more than `limit` when `limit` is less than the first one)."""
    if len(data) <= limit:
        return data
    cut = limit
    while cut > 0 and data[cut] & 0xC0 == 0x80:  # the byte after the cut goes on a character
        cut -= 1
    if cut == 0:
        cut = _length(data[0]) if data[0] >= 0xC0 else 1
    return data[:cut]


def read_page(
    path: Path, offset: int, limit: int, redactor: Redactor | None
) -> tuple[str, int, int]:
    """A page of the log from `offset`: its text with `redactor`'s values cut, how many
    bytes of the file it covers, and the file's size.

    The log was cut of the values known when it was written; `redactor` may know more (a
    value leased or stored since). So the page never ends inside one of its forms: it ends
    before the form, or, when the form starts the page, after it (a page then holds more
    than `limit` bytes), so the next page does not start with the rest of a value. Nor
    does it start inside one: what comes before `offset` (as much as a form spans) is read
    with it, and a form that runs across the page's start is shown as its marker, never
    its rest (the page then covers at least up to the form's end)."""
    hold = HeldCuts(redactor).hold
    extra = 4 * hold  # characters of at most 4 bytes
    data, size = read_log(path, offset, limit + extra)
    page = _whole_characters(data, limit)
    if redactor is None or not redactor:
        return page.decode(errors="replace"), len(page), size
    back = min(offset, size, extra)
    before, _ = read_log(path, offset - back, back) if back else (b"", size)
    prefix = before[:back].decode(errors="replace")
    text = data.decode(errors="replace")
    if len(page) == len(data) or text.encode() != data:
        shown = page.decode(errors="replace")
        return _cut_from(prefix + shown, len(prefix), redactor), len(page), size
    whole = prefix + text
    spans = redactor.spans(whole)
    start = out_of_stretches(spans, len(prefix), forward=True)
    end = max(start, len(prefix) + len(page.decode()))
    back_to = out_of_stretches(spans, end)
    end = back_to if back_to > start else out_of_stretches(spans, end, forward=True)
    covered = whole[len(prefix) : end]
    return _cut_spans_from(whole[:end], spans, len(prefix)), len(covered.encode()), size


def _cut_from(text: str, start: int, redactor: Redactor) -> str:
    """`text` from `start` on, values cut: a form that runs across `start` is shown as its
    marker."""
    return _cut_spans_from(text, redactor.spans(text), start)


def _cut_spans_from(text: str, spans: list[tuple[int, int, str]], start: int) -> str:
    """`text` from `start` on with the (start, end, name) stretches cut, one that runs
    across `start` cut from there."""
    inside = [
        (max(begin, start) - start, min(end, len(text)) - start, name)
        for begin, end, name in spans
        if end > start and begin < len(text)
    ]
    return cut_spans(text[start:], inside)


def _length(lead: int) -> int:
    """How many bytes a UTF-8 character starting with `lead` has."""
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    return 2
