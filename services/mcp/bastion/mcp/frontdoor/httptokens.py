"""The front door's token routes: `bastion token create|list|revoke` over HTTP.

Each route is a request to the bus endpoint the CLI uses (`frontdoor.tokens.*`,
`bastion.mcp.frontdoor.tokenapi`), so a profile is checked in one place and refused with the
same sentence whichever way it came. The routes are the operator's (the HTTP API's tokens
file, as the approvals routes): an agent token opens MCP sessions, it mints nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bastion.mcp.frontdoor.httperrors import HttpError
from bastion.mcp.frontdoor.tokenapi import CHECK_TIMEOUT_S
from bastion.proto import subjects
from bastion.proto.frontdoor import (
    CreateToken,
    ListTokens,
    RevokeToken,
    TokenCreated,
    TokenList,
    TokenRevoked,
)
from bastion.shared.bus import Client, request
from bastion.shared.codec import describe_decode_error
from bastion.shared.errors import InvalidInput

__all__ = ["CREATE_TIMEOUT_S", "LIST_TIMEOUT_S", "token_routes"]

logger = logging.getLogger(__name__)

CREATE_TIMEOUT_S = CHECK_TIMEOUT_S + 30.0
"""How long a creation may take: the profile's checks, the gateway's and the mint after them."""

LIST_TIMEOUT_S = 30.0

Handler = Callable[[Request], Awaitable[Response]]
Guarded = Callable[[str, Callable[[Request, str], Awaitable[Response]]], Handler]
"""The app's guard: `guarded(route, handler)` is `handler` behind the origin check, the
operator token (whose label it is given) and the route's span."""

BodyReader = Callable[[Request, int], Awaitable[bytes]]
"""The app's bounded body reader: `await body(request, limit)`."""

_create_decoder = msgspec.json.Decoder(CreateToken)
_encoder = msgspec.json.Encoder()


def _json(message: object, status: int = 200) -> Response:
    return Response(_encoder.encode(message), status_code=status, media_type="application/json")


def _tenant_of(request: Request) -> ListTokens:
    names = set(request.query_params)
    if names - {"tenant"}:
        unknown = sorted(names - {"tenant"})[0]
        raise InvalidInput(
            f"unknown query parameter {unknown[:40]!r}: the token list takes only tenant"
        )
    try:
        return msgspec.convert(dict(request.query_params), ListTokens)
    except msgspec.ValidationError as error:
        raise InvalidInput(describe_decode_error(error, ListTokens)) from None


def _revoking(token_id: str) -> RevokeToken:
    try:
        return msgspec.convert({"token_id": token_id}, RevokeToken)
    except msgspec.ValidationError:
        raise InvalidInput(
            f"{token_id[:40]!r} is not a token id (16 hex digits): GET /v1/tokens shows them"
        ) from None


def token_routes(
    guarded: Guarded, client: Client, max_body_bytes: int, body: BodyReader
) -> list[Route]:
    """`POST /v1/tokens` (201, the token shown this once), `GET /v1/tokens`
    (`{"items": [TokenInfo…]}`) and `DELETE /v1/tokens/{token_id}`, asked on `client`."""

    async def create(request: Request, label: str) -> Response:
        raw = await body(request, max_body_bytes)
        try:
            asked = _create_decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise HttpError(400, "bad_request", describe_decode_error(error, CreateToken)) from None
        created: TokenCreated = await request_(
            subjects.FRONTDOOR_TOKEN_CREATE, asked, TokenCreated, CREATE_TIMEOUT_S
        )
        logger.info(
            "agent token created over http",
            extra={"token_id": created.info.token_id, "by": f"http:{label}"},
        )
        return _json(created, 201)

    async def list_tokens(request: Request, _label: str) -> Response:
        found: TokenList = await request_(
            subjects.FRONTDOOR_TOKEN_LIST, _tenant_of(request), TokenList, LIST_TIMEOUT_S
        )
        return _json({"items": found.tokens})

    async def revoke(request: Request, label: str) -> Response:
        asked = _revoking(request.path_params["token_id"])
        revoked: TokenRevoked = await request_(
            subjects.FRONTDOOR_TOKEN_REVOKE, asked, TokenRevoked, LIST_TIMEOUT_S
        )
        logger.info(
            "agent token revoked over http",
            extra={"token_id": revoked.token_id, "by": f"http:{label}"},
        )
        return _json(revoked)

    async def request_(subject: str, message: object, reply: Any, timeout_s: float) -> Any:
        return await request(client, subject, message, reply, timeout_s=timeout_s)

    return [
        Route("/v1/tokens", guarded("/v1/tokens", create), methods=["POST"]),
        Route("/v1/tokens", guarded("/v1/tokens", list_tokens), methods=["GET"]),
        Route(
            "/v1/tokens/{token_id}", guarded("/v1/tokens/{token_id}", revoke), methods=["DELETE"]
        ),
    ]
