"""A streamed command's output, published while it runs: bounded, and with secrets cut.

A `sandbox.exec` asked with `stream` (a `shell` call whose client waits for progress) has
each chunk its command writes taken as it is read (`SandboxSpec.tap`) and published on
`subjects.call_output(session, call_id)` as an `OutputChunk`:

- at most one chunk every `interval_s`, holding what came meanwhile, the last one before
  the command's result is answered;
- at most `chunk_bytes` of text a chunk; the rest of a burst is counted (`more`), not
  kept, so a flood costs neither memory nor the bus;
- at most `total_bytes` for the whole call, then one chunk saying so (`capped`) and no
  more: the result keeps its own output limits;
- every value the result would have cut is cut from each chunk, a value split across two
  chunks too (`bastion.shared.streamcuts`); a large chunk in a worker thread, in the
  tenant's turn (`bastion.shared.cutturns`).

Nothing is published for a call that did not ask; a publish that fails ends the stream,
never the command.
"""

from __future__ import annotations

import codecs
import logging
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, Literal

import anyio
import nats.errors

from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, OutputChunk
from bastion.shared.bus import Client
from bastion.shared.codec import encode
from bastion.shared.cutturns import Cutter
from bastion.shared.redaction import Redactor
from bastion.shared.sandboxing.output import OutputTap
from bastion.shared.streamcuts import HeldCuts

__all__ = ["OutputStreams", "StreamBounds"]

logger = logging.getLogger(__name__)

_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A call id that can be a subject token (no `.`, `*`, `>` or blank)."""
_WIDEST_CHAR: Final = 4
"""The most bytes one character takes in UTF-8."""

Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class StreamBounds:
    """How often, how much at once, and how much in all a streamed call's output is sent."""

    interval_s: float = 0.5
    chunk_bytes: int = 8 * 1024
    total_bytes: int = 1024 * 1024


class _Lane:
    """One stream of the command: the bytes read since the last chunk, and its cuts."""

    def __init__(self, redactor: Redactor | None) -> None:
        self.raw = bytearray()
        self.left_out = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.cuts = HeldCuts(redactor)

    def text(self, raw: bytes, left_out: int, final: bool) -> tuple[str, int]:
        """The text of `raw` that can be shown, values cut; and the bytes not shown."""
        if left_out:  # a gap follows `raw`: a character it splits is not shown either
            text = self.decoder.decode(raw, final=True)
            self.decoder.reset()
        else:
            text = self.decoder.decode(raw, final=final)
        before = self.cuts.dropped
        shown = self.cuts.take(text)
        if left_out:
            self.cuts.gap()
        if final:
            shown += self.cuts.end()
        return shown, left_out + self.cuts.dropped - before


class _Stream:
    """One call's stream: taps its command's output, and publishes it in bounded chunks."""

    def __init__(self, client: Client, subject: str, cutter: Cutter, bounds: StreamBounds) -> None:
        self._client = client
        self._subject = subject
        self._bounds = bounds
        self._cutter = cutter
        redactor = cutter.redactor
        self._lanes: dict[Stream, _Lane] = {"stdout": _Lane(redactor), "stderr": _Lane(redactor)}
        hold = self._lanes["stdout"].cuts.hold
        self._keep = bounds.chunk_bytes + _WIDEST_CHAR * (2 * hold + 1)
        """The bytes kept of each stream between chunks: a chunk's worth, and what the cuts
        may hold back or skip."""
        self._lock = threading.Lock()  # the Docker backend's tap runs in a worker thread
        self._seq = 0
        self._sent = 0
        self._over = False

    def tap(self, stream: Stream, chunk: bytes) -> None:
        """Take one chunk the command wrote (an `OutputTap`): kept up to the bound."""
        with self._lock:
            if self._over:
                return
            lane = self._lanes[stream]
            room = max(0, self._keep - len(lane.raw))
            lane.raw += chunk[:room]
            lane.left_out += len(chunk) - min(room, len(chunk))

    async def every_interval(self) -> None:
        """Publish what came, once every interval, until cancelled."""
        while not self._over:
            await anyio.sleep(self._bounds.interval_s)
            await self.flush(final=False)

    async def flush(self, *, final: bool) -> None:
        """Publish what came since the last chunk (with `final`, all that is left)."""
        with self._lock:
            if self._over:
                return
            taken = [(lane, bytes(lane.raw), lane.left_out) for lane in self._lanes.values()]
            for lane in self._lanes.values():
                lane.raw.clear()
                lane.left_out = 0
        size = sum(len(raw) + lane.cuts.hold for lane, raw, _ in taken)
        with anyio.CancelScope(shield=True):  # what was taken is cut, whatever comes
            cut = await self._cutter.run(
                size, lambda: [lane.text(raw, left_out, final) for lane, raw, left_out in taken]
            )
        room = min(self._bounds.chunk_bytes, self._bounds.total_bytes - self._sent)
        texts: list[str] = []
        more = 0
        for text, unshown in cut:
            more += unshown
            shown = text.encode()
            if len(shown) > room:
                more += len(shown) - room
                shown = shown[:room]
            room -= len(shown)
            texts.append(shown.decode(errors="ignore"))
        stdout, stderr = texts
        sent = len(stdout.encode()) + len(stderr.encode())
        capped = self._sent + sent >= self._bounds.total_bytes
        if not (stdout or stderr or more):
            return
        self._seq += 1
        self._sent += sent
        chunk = OutputChunk(seq=self._seq, stdout=stdout, stderr=stderr, more=more, capped=capped)
        if capped:
            with self._lock:
                self._over = True
        try:
            await self._client.publish(self._subject, encode(chunk))
        except (nats.errors.Error, OSError) as error:
            logger.warning("a call's streamed output was not published: %s", error)
            with self._lock:
                self._over = True


class OutputStreams:
    """The sandbox service's streams of calls' output, on its bus connection."""

    def __init__(self, client: Client, bounds: StreamBounds) -> None:
        self._client = client
        self._bounds = bounds

    @asynccontextmanager
    async def opened(self, request: ExecRequest, cutter: Cutter) -> AsyncIterator[OutputTap | None]:
        """The tap of `request`'s stream while the block runs (None: it asked for none);
        what is left is published as the block ends, before its result is answered (not
        when it fails: its error is raised as it was)."""
        if not request.stream or not _TOKEN.fullmatch(request.call_id):
            yield None
            return
        stream = _Stream(
            self._client,
            subjects.call_output(request.session_id, request.call_id),
            cutter,
            self._bounds,
        )
        failed: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(stream.every_interval)
            try:
                yield stream.tap
            except Exception as error:  # raised as itself below, not in a task group's
                failed = error
            group.cancel_scope.cancel()
        if failed is not None:
            raise failed
        await stream.flush(final=True)
