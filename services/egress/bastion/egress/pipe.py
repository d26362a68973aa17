"""Carrying bytes both ways between two streams, bounded in bytes, idle time and duration."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from anyio.abc import SocketStream

from bastion.shared.metrics import egress_io

__all__ = ["Bounds", "pipe"]


@dataclass(frozen=True)
class Bounds:
    """What one connection may carry: bytes both ways, seconds in all, seconds of silence."""

    max_bytes: int
    max_duration_s: float
    idle_timeout_s: float


async def pipe(a: SocketStream, b: SocketStream, bounds: Bounds, first: bytes = b"") -> str:
    """Copy `a` ↔ `b` until both ends close or a bound is hit; why it ended, as a word.

    `first` is sent to `b` before anything else (bytes read past a request head).
    """
    carried = 0
    ended = "closed"

    async def copy(
        source: SocketStream, sink: SocketStream, scope: anyio.CancelScope, direction: str
    ) -> None:
        nonlocal carried, ended
        labels = {"network.io.direction": direction}
        try:
            while True:
                with anyio.fail_after(bounds.idle_timeout_s):
                    chunk = await source.receive(65536)
                carried += len(chunk)
                if carried > bounds.max_bytes:
                    ended = "byte limit"
                    scope.cancel()
                    return
                await sink.send(chunk)
                egress_io.add(len(chunk), labels)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            try:
                await sink.send_eof()
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                scope.cancel()
        except TimeoutError:
            ended = "idle timeout"
            scope.cancel()
        except (OSError, anyio.BrokenResourceError):
            scope.cancel()

    with anyio.move_on_after(bounds.max_duration_s) as deadline:
        if first:
            await b.send(first)
            carried += len(first)
            egress_io.add(len(first), {"network.io.direction": "transmit"})
        async with anyio.create_task_group() as group:
            group.start_soon(copy, a, b, group.cancel_scope, "transmit")
            group.start_soon(copy, b, a, group.cancel_scope, "receive")
    if deadline.cancelled_caught:
        ended = "time limit"
    return ended
