"""The front door's errors as HTTP: a status and an RFC 9457 `application/problem+json` body.

The body is `{"type", "title", "status", "detail", "code"}`: `type` is `urn:bastion:error:<code>`
(one problem type per wire code, `bastion.proto.errors`), `title` the status's phrase,
`detail` the sentence a person acts on, and `code` the wire code itself (an extension member).
"""

from __future__ import annotations

from http import HTTPStatus

import msgspec
from starlette.responses import Response

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError, RemoteError

__all__ = [
    "PROBLEM_JSON",
    "HttpError",
    "Problem",
    "error_response",
    "response_of",
    "status_of",
]

PROBLEM_JSON = "application/problem+json"

_STATUS_OF_CODE = {
    codes.BAD_REQUEST: 400,
    codes.INVALID_INPUT: 400,
    codes.DENIED: 403,
    codes.DECLINED: 403,
    codes.HOOK_BLOCKED: 403,
    codes.NOT_FOUND: 404,
    codes.UNKNOWN_TOOL: 404,
    codes.CONFLICT: 409,
    codes.SESSION_CLOSED: 410,
    codes.RATE_LIMITED: 429,
    codes.QUOTA_EXCEEDED: 429,
    codes.NOT_IMPLEMENTED: 501,
    codes.UNAVAILABLE: 503,
    codes.TIMEOUT: 504,
}


class HttpError(BastionError):
    """A refusal of the front door itself (auth, origin, size, route), with its HTTP status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class Problem(msgspec.Struct, frozen=True):
    """An RFC 9457 problem detail, with Bastion's wire code as an extension member."""

    type: str
    title: str
    status: int
    detail: str
    code: str


def error_response(status: int, code: str, message: str) -> Response:
    """The problem+json body every refusal has."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    problem = Problem(
        type=f"urn:bastion:error:{code}",
        title=HTTPStatus(status).phrase,
        status=status,
        detail=message,
        code=code,
    )
    body = msgspec.json.encode(problem)
    return Response(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def status_of(error: BastionError, default: int) -> int:
    """The HTTP status `error` is answered with; `default` for a code with none of its own."""
    if isinstance(error, HttpError):
        return error.status
    return _STATUS_OF_CODE.get(error.code, default)


def response_of(error: BastionError) -> Response:
    """`error` as an HTTP answer; a service's error code unknown here is a bad gateway."""
    default = 502 if isinstance(error, RemoteError) else 500
    return error_response(status_of(error, default), error.code, error.message)
