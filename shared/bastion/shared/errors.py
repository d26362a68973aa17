"""The one error hierarchy of Bastion: each error carries a wire code and a sentence.

    BastionError                  code: internal
    ├── BadRequest                code: bad_request     (the bytes are not the message)
    ├── Cancelled                 code: cancelled       (a call stopped while it ran)
    ├── InvalidInput              code: invalid_input   (the message is, a value is not)
    │   └── TooLarge, InvalidPattern, InvalidHostName, InvalidSkillFile, GitEntryRefused,
    │       SealError             (in the shared modules that raise them)
    ├── NotFound                  code: not_found
    │   └── NotStored             (`kv`: a key a store does not hold)
    ├── NotImplementedYet         code: not_implemented
    ├── QuotaExceeded             code: quota_exceeded  (at a cap: sessions, workspace size)
    ├── Unavailable               code: unavailable     (no responder, bus down)
    │   ├── NoResponders          (nothing subscribes to the subject asked)
    │   ├── Timeout               code: timeout
    │   └── CredentialsRefused    (`bus`: NATS refused this process's nkey)
    ├── AlreadyStored, ChangedSince, KeptChanging
    │                             code: conflict        (`kv`: compare-and-set lost)
    ├── RemoteError               any code              (a service answered with an error)
    ├── SandboxFailed             code: sandbox_failed  (`sandboxing.errors`)
    │   └── InitGone              (`sandboxing.warm`: a warm sandbox's init ended)
    ├── UnsafeTokensFile          code: internal        (`httptokens`)
    └── UnsafeHooksFile           code: internal        (`hookfile`)

A service's own errors derive from these in its package (`PolicyUnavailable` from
`Unavailable`, `UncertainCall` from `BastionError` with its own code, …).

Every error's `message` is safe to show to the caller: it never holds exception text,
secrets or the input that caused it. `to_reply()` is the only way an error reaches the wire.
"""

from __future__ import annotations

from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply

__all__ = [
    "BadRequest",
    "BastionError",
    "Cancelled",
    "InvalidInput",
    "NoResponders",
    "NotFound",
    "NotImplementedYet",
    "QuotaExceeded",
    "RemoteError",
    "Timeout",
    "Unavailable",
]


class BastionError(Exception):
    """Base of every error Bastion raises on purpose; `code` is stable, `message` is for people."""

    code: str = codes.INTERNAL
    """The wire code: a class default, except on `RemoteError`, which carries the one sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_reply(self) -> ErrorReply:
        """The error as it travels on the bus."""
        return ErrorReply(code=self.code, message=self.message)


class BadRequest(BastionError):
    code = codes.BAD_REQUEST


class Cancelled(BastionError):
    code = codes.CANCELLED


class InvalidInput(BastionError):
    code = codes.INVALID_INPUT


class NotFound(BastionError):
    code = codes.NOT_FOUND


class NotImplementedYet(BastionError):
    code = codes.NOT_IMPLEMENTED


class QuotaExceeded(BastionError):
    code = codes.QUOTA_EXCEEDED


class Unavailable(BastionError):
    code = codes.UNAVAILABLE


class NoResponders(Unavailable):
    """Nothing is subscribed to the subject asked: no instance of the service runs there."""


class Timeout(Unavailable):
    code = codes.TIMEOUT


class RemoteError(BastionError):
    """A service answered a request with a typed error; `code` is the one it sent."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
