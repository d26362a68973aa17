"""Who may use the front door: an allowed `Origin` (or none) and a known bearer token."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from bastion.mcp.frontdoor.httperrors import HttpError
from bastion.mcp.frontdoor.httpsettings import FrontDoor

__all__ = ["check_origin", "label_of"]


def check_origin(request: Request, door: FrontDoor) -> None:
    """Refuse a request whose `Origin` is not allowed: a web page must not drive approvals
    (a browser sends `Origin`, which defeats DNS rebinding and cross-site requests).

    Raises:
        HttpError: 403, the origin is not on `BASTION_HTTP_ORIGINS`.
    """
    origin = request.headers.get("origin")
    if origin is not None and origin.rstrip("/") not in door.origins:
        raise HttpError(
            403,
            "forbidden_origin",
            "requests from a web page's origin are refused: call the API without an Origin "
            "header, or add the origin to BASTION_HTTP_ORIGINS",
        )


def label_of(request: Request, door: FrontDoor) -> str:
    """The label of the bearer token the request carries.

    Raises:
        HttpError: 401, no token, or not one of the tokens file's.
    """
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise HttpError(
            401,
            "unauthorized",
            "this request carries no bearer token: send `Authorization: Bearer <token>` with "
            "a token of the front door's tokens file (`bastion up` writes one to "
            "<state dir>/http-tokens)",
        )
    presented = given.strip().encode()
    found = ""
    for label, token in door.tokens.items():
        # Every token is compared, in constant time, so timing tells nothing of which matched.
        if hmac.compare_digest(presented, token.encode()):
            found = label
    if not found:
        raise HttpError(
            401,
            "unauthorized",
            "the bearer token is not one of the front door's tokens: use one from its tokens "
            "file (<state dir>/http-tokens by default)",
        )
    return found
