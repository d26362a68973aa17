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
from typing import Final

import anyio
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
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


async def _read(
    process: Process,
    into: MemoryObjectSendStream[SessionMessage | Exception],
    limits: UpstreamLimits,
    link: Link,
) -> None:
    assert process.stdout is not None
    lines = buffered(process.stdout)
    async with into:
        try:
            while (message := await read_message(lines, limits.max_message_bytes)) is not None:
                await into.send(SessionMessage(message))
        except LineTooLong:
            link.break_with(f"sent a message over {limits.max_message_bytes} bytes")
            return
        except NotJsonRpc:
            link.break_with("sent a line that is not JSON-RPC")
            return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return
        await _wait_exit(process, _REAP_S)
        link.break_with(describe_exit(process))


async def _write(
    process: Process,
    source: MemoryObjectReceiveStream[SessionMessage],
    link: Link,
) -> None:
    assert process.stdin is not None
    async with source:
        try:
            async for outgoing in source:
                text = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(text.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await _wait_exit(process, _REAP_S)
            link.break_with(describe_exit(process))


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
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
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
    to_session, from_process = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_process, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with process, anyio.create_task_group() as group:
            group.start_soon(_read, process, to_session, limits, link)
            group.start_soon(_write, process, from_session, link)
            try:
                yield from_process, to_process
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process)
                group.cancel_scope.cancel()
    finally:
        for stream in (from_process, to_process, to_session, from_session):
            stream.close()
