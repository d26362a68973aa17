"""A background task's log: its output as the sandbox service keeps it, outside the sandbox
(the command cannot rewrite it), redacted as it comes, read back by byte offsets.

The log keeps the first `head_bytes` of the output, then one marker line, then, once the
task has ended, the last `TAIL_BYTES` of what came after the head. Redaction holds across
chunks: when there are values to cut, the last `_CARRY_CHARS` of what arrived are held back
until more arrives, the task goes quiet for `QUIET_S` (`settle`) or ends, and the log is
never cut inside a value's form.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import Final

from bastion.shared.redaction import Redactor

__all__ = ["QUIET_S", "TAIL_BYTES", "TaskLog", "read_log"]

TAIL_BYTES: Final = 32 * 1024
_CARRY_CHARS: Final = 8192
"""Held back from the log until more output comes: more than any form of a value spans."""
QUIET_S: Final = 0.5
"""A task printing nothing for this long has what was held back written (`settle`)."""


class TaskLog:
    """The writer of one task's log file."""

    def __init__(self, path: Path, head_bytes: int, redactor: Redactor | None) -> None:
        self.path = path
        self._head_bytes = head_bytes
        self._redactor = redactor
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._carry = ""
        self._tail = bytearray()
        self.size = 0
        """Bytes in the file."""
        self.seen = 0
        """Bytes of output, as redacted, whether kept or not."""
        self.cut = False
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

    @property
    def held(self) -> int:
        """Characters held back, to be cut with the next chunk."""
        return len(self._carry)

    def feed(self, chunk: bytes) -> None:
        """Take a chunk of output; what is safe to redact now goes to the log."""
        self._carry += self._decoder.decode(chunk)
        held = _CARRY_CHARS if self._redactor else 0
        if len(self._carry) > held:
            self._flush(len(self._carry) - held)

    def settle(self) -> None:
        """The task has gone quiet: what was held back, redacted, goes to the log."""
        if self._carry:
            self._flush(len(self._carry))

    def close(self) -> None:
        """The task ended: the rest of its output, then the tail past the head, written."""
        self._carry += self._decoder.decode(b"", final=True)
        self._flush(len(self._carry))
        if self.cut and self._tail:
            self._write(bytes(self._tail))
        os.close(self._fd)

    def _flush(self, upto: int) -> None:
        """Redact and keep the first `upto` characters held back (fewer when a form of a
        value starts before that point and ends after it)."""
        text = self._carry
        if self._redactor:
            for start, end, _ in self._redactor.spans(text):
                if start < upto < end:
                    upto = start
            done = self._redactor.redact(text[:upto])
        else:
            done = text[:upto]
        self._carry = text[upto:]
        self._keep(done.encode())

    def _keep(self, data: bytes) -> None:
        self.seen += len(data)
        room = self._head_bytes - self.size
        if not self.cut and len(data) <= room:
            self._write(data)
            return
        if not self.cut:
            self._write(data[:room])
            data = data[room:]
            self.cut = True
            self._write(
                f"\n[bastion: the output went past {self._head_bytes} bytes; what follows "
                f"is left out, and its last {TAIL_BYTES} bytes are appended when the task "
                "ends]\n".encode()
            )
        self._tail += data
        del self._tail[:-TAIL_BYTES]

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
    if len(data) <= limit:
        return data, size
    cut = limit
    while cut > 0 and data[cut] & 0xC0 == 0x80:  # the byte after the cut goes on a character
        cut -= 1
    if cut == 0:
        cut = _length(data[0]) if data[0] >= 0xC0 else 1
    return data[:cut], size


def _length(lead: int) -> int:
    """How many bytes a UTF-8 character starting with `lead` has."""
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    return 2
