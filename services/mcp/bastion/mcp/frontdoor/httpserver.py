"""Serving an ASGI app with uvicorn inside a task group, bound before "started", stopped on exit."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp

from bastion.shared.errors import Unavailable

__all__ = ["serving_http"]


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the service process owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as error:
        raise Unavailable(
            f"the front door cannot listen on {host}:{port} ({error.strerror}): stop what uses "
            "that port or set BASTION_HTTP_LISTEN (`bastion up --http-port N`)"
        ) from None


@asynccontextmanager
async def serving_http(
    app: ASGIApp, host: str, port: int, drain_timeout_s: float
) -> AsyncIterator[int]:
    """Serve `app` on `host:port` until the block exits; yields the bound port (`port` 0 picks
    one). The app's lifespan runs around serving. On exit it stops accepting, lets requests
    in flight finish up to `drain_timeout_s`."""
    sock = _bind(host, port)
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=max(1, int(drain_timeout_s)),
    )
    server = _Server(config)
    with sock:
        async with anyio.create_task_group() as serving:
            serving.start_soon(server.serve, [sock])
            try:
                yield int(sock.getsockname()[1])
            finally:
                server.should_exit = True
