"""Reading newline-delimited JSON-RPC from a byte stream, one bounded line at a time.

The SDK's own stdio reader buffers a line of any length; this one refuses a line over the
limit before it is whole, so an upstream cannot make the gateway's memory grow.
"""

from __future__ import annotations

from typing import Final

from anyio import DelimiterNotFound, EndOfStream, IncompleteRead
from anyio.abc import ByteReceiveStream
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import types
from pydantic import ValidationError

__all__ = ["LineTooLong", "NotJsonRpc", "buffered", "read_message"]

_NEWLINE: Final = b"\n"


class LineTooLong(Exception):
    """A line went past the limit before its end."""


class NotJsonRpc(Exception):
    """A line is not one JSON-RPC message."""


async def read_message(
    stream: BufferedByteReceiveStream, max_bytes: int
) -> types.JSONRPCMessage | None:
    """The next JSON-RPC message, skipping blank lines; None at the end of the stream.

    Raises:
        LineTooLong: a line longer than `max_bytes`.
        NotJsonRpc: a line that does not parse as a JSON-RPC message.
    """
    while True:
        try:
            line = await stream.receive_until(_NEWLINE, max_bytes + 1)
        except DelimiterNotFound:
            raise LineTooLong from None
        except (IncompleteRead, EndOfStream):
            # The stream ended; what is left without a newline is not a message.
            return None
        if not line.strip():
            continue
        try:
            return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except (ValidationError, ValueError):
            raise NotJsonRpc from None


def buffered(stream: ByteReceiveStream) -> BufferedByteReceiveStream:
    """`stream` with the buffer `read_message` reads lines from."""
    return BufferedByteReceiveStream(stream)
