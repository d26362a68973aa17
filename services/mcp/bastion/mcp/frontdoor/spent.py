"""A session's read stream that lets go of each message once the SDK has dispatched it.

The SDK's dispatcher reads a session's messages with `async for item in read_stream`, so
the message it read last stays referenced by that loop's variable until the next one comes —
for as long as the session lives, when it is the last. A 3.9 MB message of a million empty
objects (a `ping`'s params, a `tools/call`'s `_meta` or arguments, a JSON-RPC response the
client sends) is ~90 MB of Python objects, so each idle session could hold that much. This
wrapper, the dispatcher's read stream, empties the message it handed out before it waits
for the next: the `SessionMessage` is given a small stand-in message and no metadata (which
names the HTTP request it came in, its body read whole), so what the client sent is held
only by what serves it (a request's handler task, while it runs). The
dispatcher has handed the message on by then: it asks for the next one only after
dispatching the last. An exception the transport sends instead of a message (an error
handling a POST) has its tracebacks dropped, which held the frames that read the body.
"""

from __future__ import annotations

import contextvars
from types import TracebackType
from typing import Final, Self

from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification

__all__ = ["SPENT", "Spending"]

SPENT: Final = JSONRPCNotification(jsonrpc="2.0", method="notifications/bastion/spent")
"""What a dispatched message is replaced with in the `SessionMessage` that carried it."""

Item = SessionMessage | Exception
_LINKS: Final = 8
"""The most exceptions followed from one the transport sent (its args, causes, contexts)."""


def _untraced(error: BaseException) -> None:
    """Drop the tracebacks of an exception the transport sent (an `Exception(err)` of an
    error handling a POST) and of those it holds: their frames held the request's body."""
    waiting = [error]
    for _ in range(_LINKS):
        if not waiting:
            return
        found = waiting.pop()
        found.__traceback__ = None
        waiting += [a for a in found.args if isinstance(a, BaseException)]
        waiting += [e for e in (found.__cause__, found.__context__) if e is not None]


class Spending:
    """A transport's read stream, each message emptied once the next one is asked for."""

    def __init__(self, inner: ReadStream[Item]) -> None:
        self._inner = inner
        self._handed: Item | None = None

    @property
    def last_context(self) -> contextvars.Context | None:
        """The sender's context of the message received last: the dispatcher reads it from
        its read stream the same way, duck-typed."""
        found: contextvars.Context | None = getattr(self._inner, "last_context", None)
        return found

    def _spend(self) -> None:
        handed, self._handed = self._handed, None
        if isinstance(handed, SessionMessage):
            handed.message = SPENT
            handed.metadata = None  # the HTTP request it came in, its body read whole
        elif handed is not None:
            _untraced(handed)

    async def receive(self) -> Item:
        self._spend()
        item = await self._inner.receive()
        self._handed = item
        return item

    async def aclose(self) -> None:
        self._spend()
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Item:
        self._spend()
        item = await self._inner.__anext__()
        self._handed = item
        return item

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        self._spend()
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)
