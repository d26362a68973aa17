"""The largest MCP request `/mcp` reads (`BASTION_MCP_MAX_REQUEST_BYTES`) and how long its
body may take (`BASTION_MCP_BODY_READ_S`): a body over the limit, declared by its
Content-Length or counted as it comes, is answered 413 with a JSON-RPC error that says the
size, the limit and how to send less at once; one that does not arrive in time, 408; one the
client abandons (it disconnects before the body's end) is dropped, never run; one within the
limit is passed on whole.

A declared size over the limit is refused on the body's first chunk (read for the request's
id), never by waiting for more. The limit is low (4 MiB, the SDK's own) because the SDK parses
a request into Python objects that can take tens of times its size, held while the call
runs. The SDK's session manager has a limit of its own, whose refusal is a plain-text body an
MCP client shows as "Server returned an error response"; it is set a byte above this one, so
this one answers (`bastion.mcp.frontdoor.manager`).
"""

from __future__ import annotations

import re
from typing import Final

import anyio
import msgspec
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bastion.mcp.frontdoor.guard import jsonrpc_refusal

__all__ = ["BodyLimit", "id_at_start", "late_sentence", "too_large_sentence"]

SETTING: Final = "BASTION_MCP_MAX_REQUEST_BYTES"
READ_SETTING: Final = "BASTION_MCP_BODY_READ_S"
_HEAD_BYTES: Final = 4096
"""How much of an over-limit body is read to find the request's id (a client writes it
near the start: `{"jsonrpc": "2.0", "id": 7, "method": ...`)."""
_ID: Final = re.compile(rb'"id"\s*:\s*(-?[0-9]{1,15}|"(?:[^"\\]|\\.){0,256}")')
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN, _CLOSE = frozenset(b"{["), frozenset(b"}]")


def too_large_sentence(size: int | None, limit: int) -> str:
    """Why a request of `size` bytes (None: counted past `limit` as it came) is refused, and
    what to do."""
    how_big = f"{size} bytes, more than" if size is not None else "more than"
    return (
        f"the MCP request is {how_big} the {limit} bytes the front door reads ({SETTING}): "
        "send less at once, e.g. write a large file in parts (write_file the first part, then "
        "add the rest with apply_patch or edit_file, or a shell command, each call under the "
        "limit), or have a command in the sandbox produce it"
    )


def id_at_start(head: bytes) -> int | str | None:
    """The top-level `id` of the JSON-RPC request whose body begins with `head`; None when
    it is not there (not yet, a batch, not JSON)."""
    depth, in_string, escaped = 0, False, False
    for at, byte in enumerate(head):
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            found = _ID.match(head, at) if depth == 1 else None
            if found is not None:
                return _id_value(found.group(1))
            in_string = True
        elif byte in _OPEN:
            depth += 1
        elif byte in _CLOSE:
            depth -= 1
    return None


def _id_value(raw: bytes) -> int | str | None:
    try:
        given: int | str = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return given


def _head(chunks: list[bytes]) -> bytes:
    head = bytearray()
    for chunk in chunks:
        head += chunk[: _HEAD_BYTES - len(head)]
        if len(head) >= _HEAD_BYTES:
            break
    return bytes(head)


def _declared(scope: Scope) -> int | None:
    given = Headers(scope=scope).get("content-length", "")
    return int(given) if given.isdigit() else None


class BodyLimit:
    """The ASGI wrapper that reads a request's body, up to `limit` bytes and within `read_s`
    seconds, before `app` runs."""

    def __init__(self, app: ASGIApp, limit: int, read_s: float) -> None:
        self._app = app
        self._limit = limit
        self._read_s = read_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = _declared(scope)
        over_declared = declared is not None and declared > self._limit
        chunks: list[bytes] = []
        size, more, trailing = 0, True, None
        with anyio.move_on_after(self._read_s) as reading:
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    trailing = message
                    break
                chunk: bytes = message.get("body", b"")
                chunks.append(chunk)
                size += len(chunk)
                more = bool(message.get("more_body", False))
                if over_declared or size > self._limit:
                    sentence = too_large_sentence(declared if over_declared else None, self._limit)
                    given = id_at_start(_head(chunks))
                    await jsonrpc_refusal(413, "too_large", sentence, given)(scope, receive, send)
                    return
        if reading.cancelled_caught:
            late = jsonrpc_refusal(
                408, "timeout", late_sentence(self._read_s), id_at_start(_head(chunks))
            )
            await late(scope, receive, send)
            return
        if more:
            return  # the client left before its body's end: nothing of it runs
        replayed: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]
        if trailing is not None:
            replayed.append(trailing)

        async def replay() -> Message:
            return replayed.pop(0) if replayed else await receive()

        await self._app(scope, replay, send)


def late_sentence(read_s: float) -> str:
    """Why a request whose body did not arrive within `read_s` seconds is refused."""
    return (
        f"the MCP request's body did not arrive within {read_s:g} s ({READ_SETTING}): send it "
        "whole, at once"
    )
