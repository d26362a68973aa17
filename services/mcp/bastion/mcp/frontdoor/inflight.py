"""`/mcp` POSTs of a JSON-RPC request id still being answered in their MCP session: refused
before the SDK sees them.

The SDK's Streamable HTTP transport sends a request's answer to the stream of the POST that
registered its id last, so a second POST of an id still in flight would take the first
POST's answer and leave the first with none. This ASGI wrapper, in front of the SDK's
session manager and behind the guard (so the caller is known), reads a session-based POST's
body (one JSON-RPC message: the SDK takes no batch), holds its (agent, MCP session,
request id) pair
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
from starlette.types import ASGIApp, Receive, Scope, Send

from bastion.mcp.frontdoor.bodies import read_body, replaying
from bastion.mcp.frontdoor.guard import agent_of, jsonrpc_refusal
from bastion.proto import errors as codes

__all__ = ["InFlight", "request_id"]

Held = tuple[str, str, str]
"""An agent's token hash, its MCP session id, a request id (as the SDK keys it: `str(id)`)."""


class _Envelope(msgspec.Struct):
    """What of a JSON-RPC message is read here: its method and its id, left unparsed (the
    rest of the body is skipped, never made into objects)."""

    method: str | None = None
    id: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_MAX_ID_BYTES = 512
"""The longest request id taken (a client numbers its requests or names them shortly)."""


def request_id(body: bytes) -> str | None:
    """The id of the one JSON-RPC message of a POST's body as the SDK keys its stream
    (`str(id)`), or "" when it has none (a notification, an answer); None for a body this
    check cannot read as the SDK would, which is refused rather than passed on unheld: not
    JSON as RFC 8259 writes it (`NaN`), a batch (the SDK takes none), a message whose
    `method` is not a string, an id of more than `_MAX_ID_BYTES` bytes, nesting deeper
    than the parser goes."""
    try:
        message = msgspec.json.decode(body, type=_Envelope)
    except (msgspec.DecodeError, RecursionError):  # a ValidationError is a DecodeError
        return None
    raw = message.id
    if message.method is None or not raw:
        return ""
    if len(raw) > _MAX_ID_BYTES:
        return None
    value = msgspec.json.decode(raw)
    if isinstance(value, int | str) and not isinstance(value, bool):
        return str(value)
    return ""  # an id the SDK refuses: it answers the request itself


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
        body = await read_body(receive)
        if body is None:
            return
        token_hash = agent_of(scope).token_hash
        given = request_id(body)
        if given is None:
            await _unreadable(scope, receive, send)
            return
        held = {(token_hash, session, given)} if given else set()
        taken = sorted(taken_id for _, _, taken_id in held & self._held)
        if taken:
            await _refusal(taken)(scope, receive, send)
            return
        self._held |= held
        try:
            await self._app(scope, replaying(body, receive), send)
        finally:
            self._held -= held


_unreadable = jsonrpc_refusal(
    400,
    codes.BAD_REQUEST,
    "the request is not one JSON-RPC message in standard JSON: send one request per POST "
    "(no batch), as RFC 8259 writes JSON (no NaN, Infinity or comments), with a string "
    f"method and an id of at most {_MAX_ID_BYTES} bytes",
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
