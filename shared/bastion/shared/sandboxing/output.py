"""One output stream kept within a byte budget: its head and its tail, the middle counted;
and, for a run whose output is watched as it comes, each chunk handed on as it is read."""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, Callable
from functools import partial
from typing import Final, Literal

__all__ = ["CUT_MARKERS", "CappedOutput", "OutputTap", "capped_pair", "cut_marker"]

OutputTap = Callable[[Literal["stdout", "stderr"], bytes], None]
"""Called with each chunk of a run's output as it is read, and which stream it is of. It
may be called from a worker thread (the Docker backend reads there): it must only take the
bytes and return."""


def cut_marker(cut: int) -> bytes:
    """The line put where bytes were left out of the middle of a stream."""
    return f"[... {cut} bytes cut ...]\n".encode()


CUT_MARKERS: Final = re.compile(r"^\[\.\.\. \d+ bytes cut \.\.\.\]\n", re.MULTILINE)
"""Where a stream's text says bytes were left out of it (`cut_marker`): what is beside
each could be part of a secret value the gap holds the rest of
(`bastion.shared.linecuts.cut_around_gaps`). A command may print such a line itself;
then only its own output beside it is dropped."""


class CappedOutput:
    """Collects a stream, keeping at most `cap` bytes: the first half and the last half."""

    def __init__(self, cap: int, tap: Callable[[bytes], None] | None = None) -> None:
        self._tap = tap
        self._head_cap = cap - cap // 2
        self._tail_cap = cap // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream."""
        if self._tap is not None:
            self._tap(chunk)
        self.total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self._tail_cap:
            self._tail += chunk
            excess = len(self._tail) - self._tail_cap
            if excess > 0:
                del self._tail[:excess]

    async def drain(self, stream: AsyncIterable[bytes]) -> None:
        """Feed every chunk of `stream` until it ends."""
        async for chunk in stream:
            self.feed(chunk)

    @property
    def cut(self) -> int:
        """How many bytes were left out of the middle."""
        return self.total - len(self._head) - len(self._tail)

    def text(self) -> str:
        """What was kept, as text; a marker line stands where the middle was cut."""
        if not self.cut:
            return (self._head + self._tail).decode("utf-8", errors="replace")
        head = bytes(self._head)
        if head and not head.endswith(b"\n"):
            head += b"\n"
        return (head + cut_marker(self.cut) + self._tail).decode("utf-8", errors="replace")


def capped_pair(cap: int, tap: OutputTap | None = None) -> tuple[CappedOutput, CappedOutput]:
    """A run's stdout and stderr, each kept within `cap`, each chunk also given to `tap`."""
    if tap is None:
        return CappedOutput(cap), CappedOutput(cap)
    return CappedOutput(cap, partial(tap, "stdout")), CappedOutput(cap, partial(tap, "stderr"))
