"""What can go wrong with an upstream MCP server, as typed errors with a code and a sentence.

    BastionError
    ├── Unavailable
    │   └── UpstreamUnreachable   code: unavailable    (could not start, reach or greet it)
    ├── UpstreamNoAnswer          code: uncertain      (a call got no answer: it may have run)
    └── UpstreamRefused           code: upstream_error (it answered with a JSON-RPC error)

A message never carries what the server wrote to its standard error, nor exception text:
it says what happened and what to check.
"""

from __future__ import annotations

from typing import Final

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError, Unavailable

__all__ = [
    "UpstreamNoAnswer",
    "UpstreamRefused",
    "UpstreamUnreachable",
    "quoted",
]

_QUOTE_CHARS: Final = 300


def quoted(text: str, limit: int = _QUOTE_CHARS) -> str:
    """`text` on one line, cut to `limit` characters (marked with `…` when cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class UpstreamUnreachable(Unavailable):
    """The server could not be started, reached, or did not complete its handshake."""

    code = codes.UNAVAILABLE


class UpstreamNoAnswer(BastionError):
    """A call got no answer: the call may or may not have taken effect.

    The connection is over: the server was stopped (stdio) or the connection dropped.
    """

    code = codes.UNCERTAIN


class UpstreamRefused(BastionError):
    """The server answered the request with a JSON-RPC error; its message is quoted."""

    code = codes.UPSTREAM_ERROR

    def __init__(self, server: str, doing: str, error_code: int, error_message: str) -> None:
        super().__init__(
            f"the MCP server {server} answered {doing} with an error ({error_code}): "
            f"{quoted(error_message)!r}"
        )
        self.error_code = error_code
