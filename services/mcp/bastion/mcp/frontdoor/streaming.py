"""A call's progress, told to a client that asked for it (a `progressToken`).

Every `heartbeat_s` a notification says the call still runs (`shell runs (4 s)`), so a
command that prints nothing is not taken for a hung one. A call sent with `stream` (the
front door sends every call of such a client so; only `shell` streams) also has its
command's output told as it comes: the front door reads `calls.output.<session>.<call id>`
(the call id is its own) while the call runs, and each `OutputChunk` the sandbox publishes
there — bounded, and with secrets cut, by the sandbox (`bastion.sandbox.streaming`) —
becomes one notification whose message is the new output. Every chunk that came is told
before the call's result is answered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import nats.errors
from anyio.abc import ObjectReceiveStream
from mcp.server.context import ServerRequestContext
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bastion.proto import subjects
from bastion.proto.sandbox import OutputChunk
from bastion.proto.tools import ToolCall
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.errors import BadRequest

__all__ = ["chunk_text", "reporting", "wants_progress"]

logger = logging.getLogger(__name__)

_QUEUED: Final = 16
"""Chunks waiting for a slow client; one more is counted, not kept."""
_LET_GO_S: Final = 5.0
"""How long the chunks still on their way are waited for once the call has its answer."""


def wants_progress(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request asked for progress notifications (its `_meta.progressToken`)."""
    return ctx.meta is not None and ctx.meta.get("progress_token") is not None


def chunk_text(chunk: OutputChunk, missed: int = 0) -> str:
    """A chunk as a notification's message: its output, then what it left out."""
    text = chunk.stdout + chunk.stderr
    notes = []
    if chunk.more + missed:
        notes.append(f"… {chunk.more + missed} bytes more")
    if chunk.capped:
        notes.append("… the output streams no further: the call's result has it")
    if notes and text and not text.endswith("\n"):
        text += "\n"
    return text + "\n".join(notes)


class _Progress:
    """The request's notifications, each with a progress larger than the one before."""

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._ctx = ctx
        self._started = anyio.current_time()
        self._last = 0.0
        self._lock = anyio.Lock()
        self.missed = 0
        """Bytes of chunks a slow client could not be sent (added to the next one's)."""

    async def tell(self, message: str) -> None:
        """Send one notification; a client gone meanwhile is not told (its call goes on)."""
        async with self._lock:
            self._last = max(anyio.current_time() - self._started, self._last + 0.001)
            try:
                await self._ctx.session.report_progress(self._last, None, message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                logger.info("a progress notification found its client gone")


async def _beat(progress: _Progress, tool: str, heartbeat_s: float) -> None:
    elapsed = 0.0
    while True:
        await anyio.sleep(heartbeat_s)
        elapsed += heartbeat_s
        await progress.tell(f"{tool} runs ({elapsed:g} s)")


async def _tell_chunks(progress: _Progress, chunks: ObjectReceiveStream[OutputChunk]) -> None:
    async with chunks:
        async for chunk in chunks:
            missed, progress.missed = progress.missed, 0
            await progress.tell(chunk_text(chunk, missed))


@asynccontextmanager
async def reporting(
    ctx: ServerRequestContext[Any, Any],
    client: Client,
    session_id: str,
    call: ToolCall,
    heartbeat_s: float,
) -> AsyncIterator[None]:
    """Tell a client that asked for progress how the call goes, while the block runs; an
    error of the block is raised as it was (a `BastionError` stays one)."""
    if not wants_progress(ctx):
        yield
        return
    progress = _Progress(ctx)
    arrived, chunks = anyio.create_memory_object_stream[OutputChunk](_QUEUED)

    async def deliver(msg: Msg) -> None:
        try:
            chunk: OutputChunk = decode(msg.data, OutputChunk)
        except BadRequest:
            return
        try:
            arrived.send_nowait(chunk)
        except anyio.WouldBlock:
            progress.missed += len(chunk.stdout.encode()) + len(chunk.stderr.encode())
            progress.missed += chunk.more

    subscription = None
    failed: Exception | None = None
    if call.stream and call.call_id is not None:
        subject = subjects.call_output(session_id, call.call_id)
        subscription = await client.subscribe(subject, cb=deliver)
    async with anyio.create_task_group() as group:
        beating = anyio.CancelScope()

        async def beat() -> None:
            with beating:
                await _beat(progress, call.tool, heartbeat_s)

        group.start_soon(beat)
        group.start_soon(_tell_chunks, progress, chunks)
        try:
            yield
        except Exception as error:  # raised as itself below, not in a task group's
            failed = error
        finally:
            beating.cancel()
            if subscription is not None:
                await _let_go(subscription)
            arrived.close()
    if failed is not None:
        raise failed


async def _let_go(subscription: Subscription) -> None:
    """Stop reading the call's output once every chunk that came was handed on (which is
    what draining waits for), or after `_LET_GO_S` whatever is left."""
    with anyio.CancelScope(shield=True):
        try:
            with anyio.move_on_after(_LET_GO_S) as waited:
                await subscription.drain()  # type: ignore[no-untyped-call]
            if waited.cancelled_caught:
                await subscription.unsubscribe()
        except nats.errors.Error as error:
            logger.info("a call's output subscription ended with its connection: %s", error)
