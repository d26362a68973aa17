"""The front door's errors as HTTP: a status, and `{"error": {"code", "message"}}`."""

from __future__ import annotations

import msgspec
from starlette.responses import Response

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError, RemoteError

__all__ = ["HttpError", "error_response", "response_of"]

_STATUS_OF_CODE = {
    codes.BAD_REQUEST: 400,
    codes.INVALID_INPUT: 400,
    codes.NOT_FOUND: 404,
    codes.CONFLICT: 409,
    codes.SESSION_CLOSED: 410,
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


class _Detail(msgspec.Struct, frozen=True):
    code: str
    message: str


class _Body(msgspec.Struct, frozen=True):
    error: _Detail


def error_response(status: int, code: str, message: str) -> Response:
    """The JSON error body every refusal has."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = msgspec.json.encode(_Body(error=_Detail(code=code, message=message)))
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def response_of(error: BastionError) -> Response:
    """`error` as an HTTP answer; a service's error code unknown here is a bad gateway."""
    if isinstance(error, HttpError):
        return error_response(error.status, error.code, error.message)
    default = 502 if isinstance(error, RemoteError) else 500
    return error_response(_STATUS_OF_CODE.get(error.code, default), error.code, error.message)
