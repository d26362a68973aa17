"""A TCP server on 127.0.0.1 for the length of a block: the one way tests stand one up."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from anyio.abc import SocketAttribute, SocketStream

__all__ = ["serving_on_loopback"]


@asynccontextmanager
async def serving_on_loopback(
    handle: Callable[[SocketStream], Awaitable[None]],
) -> AsyncIterator[int]:
    """Hand each connection to `handle` until the block exits; yields the port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        yield port
        group.cancel_scope.cancel()
