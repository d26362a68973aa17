"""The stdio transport: a server process, its output read one bounded line at a time.

What the server writes is parsed into the SDK's `SessionMessage`s; a line over the limit
or not JSON-RPC breaks the link and stops the server, as does its output ending. Its
standard error goes to /dev/null: servers can print secrets there. The process runs in a
session (and process group) of its own, so stopping it kills all it started; a sandboxed
one dies with bwrap, whose child is pid 1 of its own pid namespace.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Final, Self

import anyio
from anyio.abc import Process
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from bastion.mcp.gateway.upstream.launch import Launch
from bastion.mcp.gateway.upstream.limits import UpstreamLimits
from bastion.mcp.gateway.upstream.lines import LineTooLong, NotJsonRpc, buffered, read_message
from bastion.mcp.gateway.upstream.link import Link

__all__ = ["describe_exit", "stdio_streams"]

logger = logging.getLogger(__name__)

EXIT_GRACE_S: Final = 1.0
"""How long a server has to exit by itself once its input is closed, before SIGKILL."""
_REAP_S: Final = 2.0


def describe_exit(process: Process) -> str:
    """`stopped (exit status 1)`, `was killed by signal 9`, or `closed its output`."""
    status = process.returncode
    if status is None:
        return "closed its output"
    if status < 0:
        return f"was killed by signal {-status}"
    return f"stopped (exit status {status})"


def _kill_group(process: Process) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _wait_exit(process: Process, timeout_s: float) -> None:
    with anyio.move_on_after(timeout_s):
        await process.wait()


class _Lines:
    """The session's read stream: each `receive` reads the server's next message from its
    output itself, in the session's reader task (no task and stream between them).

    A line over the limit or not JSON-RPC breaks the link (the server is killed); the end
    of its output waits a moment for it to exit and breaks the link with how it ended. Each
    ends the stream, after the link says why."""

    def __init__(self, process: Process, limits: UpstreamLimits, link: Link) -> None:
        assert process.stdout is not None
        self._process = process
        self._lines = buffered(process.stdout)
        self._max_bytes = limits.max_message_bytes
        self._link = link
        self._ended = False

    async def receive(self) -> SessionMessage | Exception:
        if self._ended:
            raise anyio.EndOfStream
        try:
            message = await read_message(self._lines, self._max_bytes)
        except LineTooLong:
            self._end(f"sent a message over {self._max_bytes} bytes")
        except NotJsonRpc:
            self._end("sent a line that is not JSON-RPC")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended = True
            raise anyio.EndOfStream from None
        else:
            if message is not None:
                return SessionMessage(message)
            await _wait_exit(self._process, _REAP_S)
            self._end(describe_exit(self._process))
        raise anyio.EndOfStream

    def _end(self, reason: str) -> None:
        self._ended = True
        self._link.break_with(reason)

    async def aclose(self) -> None:
        self._ended = True

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


class _Writer:
    """The session's write stream: each `send` writes one message to the server's input
    itself, in the task that sends it (asyncio orders the writes and waits for room).

    A write the server's input refuses waits a moment for it to exit and breaks the link
    with how it ended; that send, and every one after it, raises `BrokenResourceError`."""

    def __init__(self, process: Process, link: Link) -> None:
        assert process.stdin is not None
        self._stdin = process.stdin
        self._process = process
        self._link = link
        self._closed = False

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed or not self._link.alive:
            raise anyio.BrokenResourceError
        text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            await self._stdin.send(text.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self._closed = True
            await _wait_exit(self._process, _REAP_S)
            self._link.break_with(describe_exit(self._process))
            raise anyio.BrokenResourceError from None

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


async def _stop(process: Process) -> None:
    """Close its input, give it a moment to exit, then kill its whole process group."""
    assert process.stdin is not None
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if process.returncode is None:
        await _wait_exit(process, EXIT_GRACE_S)
    _kill_group(process)
    await _wait_exit(process, _REAP_S)


@asynccontextmanager
async def stdio_streams(
    launch: Launch, limits: UpstreamLimits, link: Link
) -> AsyncIterator[TransportStreams]:
    """Start the process and yield the session's streams; stop it on exit, whatever happens.

    Raises:
        OSError: the program could not be started.
    """
    process = await anyio.open_process(
        launch.argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=launch.env,
        cwd=launch.cwd,
        start_new_session=True,
        pass_fds=launch.pass_fds,
    )
    link.on_break(lambda: _kill_group(process))
    async with process:
        try:
            yield _Lines(process, limits, link), _Writer(process, link)
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
