"""Who may use `/mcp`: a loopback Host when listening on loopback, an allowed Origin (or
none), and a live agent token. Every refusal is JSON-RPC shaped, so an MCP client shows it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from bastion.mcp.frontdoor.httperrors import HttpError
from bastion.mcp.frontdoor.httpguard import check_origin
from bastion.mcp.frontdoor.httpsettings import FrontDoor
from bastion.mcp.frontdoor.tokens import TokenStore
from bastion.proto.frontdoor import TokenInfo
from bastion.shared.errors import Unavailable
from bastion.shared.netclass import is_loopback_host

__all__ = ["AGENT_KEY", "Agent", "McpGuard", "agent_of", "jsonrpc_refusal"]

AGENT_KEY: Final = "bastion.agent"
"""Where the guard leaves the request's `Agent` in the ASGI scope, for the handlers."""

_INVALID_REQUEST: Final = -32600
_HOW_TO_GET_A_TOKEN: Final = (
    "create one with `bastion token create --agent NAME` (it is printed once) and send it as "
    "`Authorization: Bearer <token>`"
)


@dataclass(frozen=True)
class Agent:
    """The caller of one request: its token's hash and the profile the token gives."""

    token_hash: str
    info: TokenInfo


class _Error(msgspec.Struct, frozen=True):
    code: int
    message: str
    data: dict[str, str]


class _Body(msgspec.Struct, frozen=True):
    jsonrpc: str
    id: int | str | None
    error: _Error


def jsonrpc_refusal(
    status: int, code: str, message: str, request_id: int | str | None = None
) -> Response:
    """An HTTP refusal whose body is a JSON-RPC error (to `request_id`, else with no id), its
    Bastion code in `data`."""
    body = _Body(
        jsonrpc="2.0",
        id=request_id,
        error=_Error(code=_INVALID_REQUEST, message=message, data={"code": code}),
    )
    headers = None
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="bastion", error="invalid_token"'}
    return Response(
        msgspec.json.encode(body),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _check_host(request: Request, door: FrontDoor) -> None:
    """On loopback, a page of another site reaching us through DNS rebinding names its own
    host in `Host`: only loopback names are taken."""
    if not is_loopback_host(door.host):
        return
    given = request.headers.get("host", "")
    name = given.rsplit(":", 1)[0] if not given.endswith("]") else given
    if not is_loopback_host(name):
        raise HttpError(
            421,
            "misdirected",
            "this front door listens on loopback and answers only requests for 127.0.0.1, "
            "localhost or [::1]: use one of those in the URL",
        )


def agent_of(scope: Scope) -> Agent:
    """The request's caller, as the guard found it."""
    agent = scope.get(AGENT_KEY)
    assert isinstance(agent, Agent), "the guard runs before every /mcp handler"
    return agent


class McpGuard:
    """The ASGI wrapper of `/mcp`: refuses, or passes the request on with its `Agent`."""

    def __init__(self, app: ASGIApp, door: FrontDoor, tokens: TokenStore) -> None:
        self._app = app
        self._door = door
        self._tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request = Request(scope)
        try:
            _check_host(request, self._door)
            check_origin(request, self._door)
            agent = await self._agent(request)
        except HttpError as refused:
            await jsonrpc_refusal(refused.status, refused.code, refused.message)(
                scope, receive, send
            )
            return
        except Unavailable as down:
            await jsonrpc_refusal(503, down.code, down.message)(scope, receive, send)
            return
        scope[AGENT_KEY] = agent
        await self._app(scope, receive, send)

    async def _agent(self, request: Request) -> Agent:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise HttpError(
                401, "unauthorized", f"this request carries no agent token: {_HOW_TO_GET_A_TOKEN}"
            )
        found = await self._tokens.find(given.strip())
        if found is None:
            raise HttpError(
                401,
                "unauthorized",
                "the agent token is unknown or was revoked (`bastion token list` shows the "
                f"live ones): {_HOW_TO_GET_A_TOKEN}",
            )
        return Agent(token_hash=found[0], info=found[1])
