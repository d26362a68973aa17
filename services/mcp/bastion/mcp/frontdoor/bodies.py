"""A request's body read whole by an ASGI wrapper, and handed on to the app behind it."""

from __future__ import annotations

from starlette.types import Message, Receive

__all__ = ["read_body", "replaying"]


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` with `body` given first, as one message (what follows is the client's)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
