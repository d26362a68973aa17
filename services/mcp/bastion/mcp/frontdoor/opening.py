"""A client's `initialize`, cut to what Bastion keeps of it before the SDK reads it.

The SDK keeps an `initialize`'s params on the session's connection for as long as the
session lives, and the front door stores them in the session's KV record, so any replica
can adopt it. Taken whole, a client could make each session that only initializes keep
megabytes (a 3.9 MB `capabilities.experimental` of a million empty objects is a million
Python objects). This ASGI wrapper, in front of the SDK's session manager and behind the
body limit, reads every POST with msgspec — the envelope's `method`, `id` and `params` left
unparsed — then, for an `initialize` (the one that opens a session, or one sent again in a
session: the SDK takes a session's last `initialize` as its client's), its params into
bounded structs that keep only what is used — the protocol version, the
capabilities Bastion or the SDK reads (`elicitation`'s modes, `sampling`'s, `roots`'
`listChanged`), the client's name, title and version, each cut to `NAME_CHARS` — skipping
the rest without making objects of it. The SDK is handed a new body with those params; a
session adopted from its KV record is born with the same cut (`kept_params`).
An `initialize` whose params have not the shape MCP gives them (as these structs read it:
strictly, so nothing the SDK's laxer parse would take whole gets past), or a POST opening
no session whose body is not one JSON-RPC message, is answered 400 before the SDK reads it
(in a session, `bastion.mcp.frontdoor.inflight` refuses what it cannot read).
"""

from __future__ import annotations

from typing import Final

import msgspec
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from bastion.mcp.frontdoor.bodies import read_body, replaying
from bastion.mcp.frontdoor.bodylimit import id_at_start
from bastion.mcp.frontdoor.guard import jsonrpc_refusal
from bastion.shared.errors import BadRequest

__all__ = [
    "NAME_CHARS",
    "Opening",
    "Unreadable",
    "UnreadableInitialize",
    "kept_initialize",
    "kept_params",
]

NAME_CHARS: Final = 256
"""The most characters kept of a client's name, title, version and protocol version."""


class _Mode(msgspec.Struct, omit_defaults=True):
    """A capability's sub-capability whose presence is what counts (`elicitation.form`,
    `sampling.tools`): whatever it holds is skipped."""


class _Elicitation(msgspec.Struct, omit_defaults=True):
    form: _Mode | None = None
    url: _Mode | None = None


class _Sampling(msgspec.Struct, omit_defaults=True):
    context: _Mode | None = None
    tools: _Mode | None = None


class _Roots(msgspec.Struct, omit_defaults=True, rename="camel"):
    list_changed: bool | None = None


class _Capabilities(msgspec.Struct, omit_defaults=True):
    elicitation: _Elicitation | None = None
    sampling: _Sampling | None = None
    roots: _Roots | None = None


class _ClientInfo(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    title: str | None = None
    version: str | None = None


class _Params(msgspec.Struct, omit_defaults=True, rename="camel"):
    protocol_version: str | None = None
    capabilities: _Capabilities | None = None
    client_info: _ClientInfo | None = None


class _Envelope(msgspec.Struct):
    """One JSON-RPC message: its method, and its id and params left unparsed."""

    method: str | None = None
    id: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    params: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _Initialize(msgspec.Struct, omit_defaults=True):
    """The `initialize` handed to the SDK."""

    jsonrpc: str
    id: msgspec.Raw
    method: str
    params: _Params


class Unreadable(BadRequest):
    """A body that is not one JSON-RPC message, or an `initialize` of another shape."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            "the request is not one JSON-RPC message in standard JSON, or its initialize "
            "params are not an object with protocolVersion, capabilities and clientInfo as "
            f"MCP gives them ({detail[:200]}): send one request per POST, as the MCP "
            "specification writes it"
        )


class UnreadableInitialize(Unreadable):
    """An `initialize` whose params are not of MCP's shape as these structs read it (what
    the SDK's laxer parse might take whole is refused instead)."""


def _cut(text: str | None) -> str | None:
    return None if text is None else text[:NAME_CHARS]


def _kept(params: _Params) -> _Params:
    info = params.client_info
    return _Params(
        protocol_version=_cut(params.protocol_version),
        capabilities=params.capabilities,
        client_info=None
        if info is None
        else _ClientInfo(name=_cut(info.name), title=_cut(info.title), version=_cut(info.version)),
    )


def kept_initialize(body: bytes) -> bytes | None:
    """The body the SDK is handed for an `initialize`, with only the params Bastion keeps;
    None for any other message (passed on as it came).

    Raises:
        Unreadable: `body` is not one JSON-RPC message in standard JSON.
        UnreadableInitialize: it is an `initialize` whose params are not an object of
            MCP's shape.
    """
    try:
        message = msgspec.json.decode(body, type=_Envelope)
    except (msgspec.DecodeError, RecursionError) as error:  # a ValidationError is one too
        raise Unreadable(str(error)) from None
    if message.method != "initialize":
        return None
    try:
        params = msgspec.json.decode(message.params or b"{}", type=_Params)
    except (msgspec.DecodeError, RecursionError) as error:
        raise UnreadableInitialize(str(error)) from None
    kept = _Initialize(
        jsonrpc="2.0",
        id=message.id or msgspec.Raw(b"null"),
        method="initialize",
        params=_kept(params),
    )
    return msgspec.json.encode(kept)


def kept_params(stored: str) -> bytes:
    """What is kept of `initialize` params stored as JSON (a session's KV record, which a
    front door before this cut may have written whole).

    Raises:
        Unreadable: `stored` is not params of MCP's shape.
    """
    try:
        return msgspec.json.encode(_kept(msgspec.json.decode(stored, type=_Params)))
    except (msgspec.DecodeError, RecursionError) as error:
        raise Unreadable(str(error)) from None


class Opening:
    """The ASGI wrapper: every `initialize` reaches the SDK cut to what is kept."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return
        try:
            kept = kept_initialize(body)
        except Unreadable as error:
            opens = Headers(scope=scope).get(MCP_SESSION_ID_HEADER) is None
            if opens or isinstance(error, UnreadableInitialize):
                refusal = jsonrpc_refusal(400, error.code, error.message, id_at_start(body[:4096]))
                await refusal(scope, receive, send)
                return
            kept = None  # in a session, the check of ids in flight refuses what it cannot read
        if kept is not None:
            body = kept  # the client's own body is not held while the SDK serves it
        await self._app(scope, replaying(body, receive), send)
