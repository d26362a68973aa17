"""One output stream kept within a byte budget: its head and its tail, the middle counted."""

from __future__ import annotations

from collections.abc import AsyncIterable

__all__ = ["CappedOutput", "cut_marker"]


def cut_marker(cut: int) -> bytes:
    """The line put where bytes were left out of the middle of a stream."""
    return f"[... {cut} bytes cut ...]\n".encode()


class CappedOutput:
    """Collects a stream, keeping at most `cap` bytes: the first half and the last half."""

    def __init__(self, cap: int) -> None:
        self._head_cap = cap - cap // 2
        self._tail_cap = cap // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream."""
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
