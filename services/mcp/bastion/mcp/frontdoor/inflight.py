"""`/mcp` POSTs of a JSON-RPC request id still being answered in their MCP session: refused
before the SDK sees them.

The SDK's Streamable HTTP transport sends a request's answer to the stream of the POST that
registered its id last, so a second POST of an id still in flight would take the first
POST's answer and leave the first with none. This ASGI wrapper, in front of the SDK's
session manager and behind the guard (so the caller is known), reads a session-based POST's
body (one JSON-RPC message or a batch), holds its (agent, MCP session, request id) pairs
for as long as that POST is served, refuses at once a POST naming a pair held (409, a
JSON-RPC error with no id, so a client matching answers by id does not take it for the
first POST's), and hands the SDK the body it read. What it holds is this replica's: a
request another replica serves has that replica's own stream.
"""

from __future__ import annotations

import msgspec
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bastion.mcp.frontdoor.guard import agent_of, jsonrpc_refusal
from bastion.proto import errors as codes

__all__ = ["InFlight", "request_ids"]

Held = tuple[str, str, str]
"""An agent's token hash, its MCP session id, a request id (as the SDK keys it: `str(id)`)."""


class _Envelope(msgspec.Struct):
    """What of a JSON-RPC message is read here: its method and its id, left unparsed (the
    rest of the body is skipped, never made into objects)."""

    method: str | None = None
    id: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_MAX_ID_BYTES = 512
"""A longer id is no id the SDK takes (it keys streams by a number or a short string)."""


def request_ids(body: bytes) -> set[str] | None:
    """The ids of the JSON-RPC requests in a POST's body, as the SDK keys their streams
    (`str(id)`); None for a body that is not JSON as RFC 8259 writes it (`NaN`, comments:
    a parser more lenient than this one would take ids this one cannot see)."""
    try:
        given = msgspec.json.decode(body, type=list[msgspec.Raw] | _Envelope)
    except msgspec.ValidationError:
        return set()  # not JSON-RPC messages: the SDK says so
    except msgspec.DecodeError:
        return None
    ids: set[str] = set()
    for element in given if isinstance(given, list) else [given]:
        try:
            message = (
                element
                if isinstance(element, _Envelope)
                else msgspec.json.decode(element, type=_Envelope)
            )
        except msgspec.ValidationError:
            continue  # not a request: the SDK answers it
        raw = message.id
        if message.method is None or not raw or len(raw) > _MAX_ID_BYTES:
            continue
        value = msgspec.json.decode(raw)
        if isinstance(value, int | str) and not isinstance(value, bool):
            ids.add(str(value))
    return ids


async def _body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` with `body` given first, as one message (what follows is the client's)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class InFlight:
    """The ASGI wrapper: one POST at a time for each request id of an MCP session."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._held: set[Held] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = None
        if scope["type"] == "http" and scope["method"] == "POST":
            session = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        if session is None:
            await self._app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return
        token_hash = agent_of(scope).token_hash
        ids = request_ids(body)
        if ids is None:
            await _not_json(scope, receive, send)
            return
        held = {(token_hash, session, request_id) for request_id in ids}
        taken = sorted(request_id for _, _, request_id in held & self._held)
        if taken:
            await _refusal(taken)(scope, receive, send)
            return
        self._held |= held
        try:
            await self._app(scope, _replaying(body, receive), send)
        finally:
            self._held -= held


_not_json = jsonrpc_refusal(
    400,
    codes.BAD_REQUEST,
    "the request is not JSON as RFC 8259 writes it (no NaN, Infinity or comments): send "
    "standard JSON",
)


def _refusal(taken: list[str]) -> Response:
    ids = ", ".join(taken)
    named = f"request id {ids} is" if len(taken) == 1 else f"request ids {ids} are"
    return jsonrpc_refusal(
        409,
        codes.CONFLICT,
        f"{named} still being answered in this MCP session: wait for the answer on the POST "
        "that sent it; if that POST's stream was cut, send it again in a moment, once the "
        "front door has seen it end (a tools/call sent again with the same id and arguments "
        "is answered from its one run, never run twice)",
    )
