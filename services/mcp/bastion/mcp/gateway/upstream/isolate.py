"""An SDK transport run in a task of its own, so what it raises never reaches the caller.

The SDK's HTTP transports run their readers in their own task groups: an error there (an
SSE stream that breaks its limit, a connection reset) would cancel the block using the
connection and come out of it as a foreign exception. Here the transport's streams are
copied to ours; when it fails or ends, the link breaks and the session sees the
connection closed, so the call waiting on it is `UpstreamNoAnswer`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, TypeVar

import anyio
import httpx2
from anyio.abc import TaskStatus
from mcp.client._transport import ReadStream, TransportStreams, WriteStream
from mcp.shared.message import SessionMessage

from bastion.mcp.gateway.upstream.link import Link

__all__ = ["UNREACHED", "isolated"]

UNREACHED: Final = "could not be reached"

_M = TypeVar("_M")


def _reason(error: BaseException) -> str:
    """Why a transport failed, in a few words (the exception's own text is not shown)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, httpx2.TransportError):
        return f"{UNREACHED} ({type(error).__name__})"
    return "broke off the HTTP exchange"


async def _copy(source: ReadStream[_M], sink: WriteStream[_M]) -> None:
    async for item in source:
        await sink.send(item)


@asynccontextmanager
async def isolated(
    transport: AbstractAsyncContextManager[TransportStreams], link: Link
) -> AsyncIterator[TransportStreams]:
    """`transport`'s streams, its failures contained: an error while it starts is raised
    (the server could not be reached); after that, it only breaks the link."""
    to_session, from_transport = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_transport, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def run(*, task_status: TaskStatus[None]) -> None:
        started = False
        try:
            async with transport as (read, write), anyio.create_task_group() as copies:
                task_status.started()
                started = True
                copies.start_soon(_copy, from_session, write)
                await _copy(read, to_session)
                copies.cancel_scope.cancel()
            link.break_with("closed the connection")
        except Exception as error:
            if not started:
                raise
            link.break_with(_reason(error))
        finally:
            to_session.close()

    async with anyio.create_task_group() as group:
        await group.start(run)
        try:
            yield from_transport, to_transport
        finally:
            group.cancel_scope.cancel()
            for stream in (from_transport, to_transport, from_session):
                stream.close()
