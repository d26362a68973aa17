"""The typed error every request may be answered with, and the codes it carries."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from bastion.proto._base import Message

__all__ = [
    "BAD_REQUEST",
    "CANCELLED",
    "CONFLICT",
    "DECLINED",
    "DENIED",
    "HOOK_BLOCKED",
    "INTERNAL",
    "INVALID_INPUT",
    "NEEDS_APPROVAL",
    "NOT_FOUND",
    "NOT_IMPLEMENTED",
    "PROGRAM_FAILED",
    "QUOTA_EXCEEDED",
    "RATE_LIMITED",
    "SANDBOX_FAILED",
    "SESSION_CLOSED",
    "TIMEOUT",
    "TOOL_CHANGED",
    "UNAVAILABLE",
    "UNCERTAIN",
    "UNKNOWN_TOOL",
    "UPSTREAM_ERROR",
    "WAITING_FOR_APPROVAL",
    "ErrorCode",
    "ErrorReply",
]

ErrorCode = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z_]*$", max_length=64)]
"""A stable, machine-readable error code. New codes may be added; a code never changes meaning."""

BAD_REQUEST: Final = "bad_request"
"""The request did not decode into the message the endpoint takes."""
INVALID_INPUT: Final = "invalid_input"
"""The request decoded but a value in it is not acceptable (a path outside the workspace...)."""
NOT_FOUND: Final = "not_found"
"""The thing named (a session, a file) does not exist."""
NOT_IMPLEMENTED: Final = "not_implemented"
"""The endpoint exists but its capability has not been built yet."""
UNKNOWN_TOOL: Final = "unknown_tool"
"""The session's catalogue has no tool of that name."""
SESSION_CLOSED: Final = "session_closed"
"""The session was closed; open a new one."""
DENIED: Final = "denied"
"""The policy refused the call."""
NEEDS_APPROVAL: Final = "needs_approval"
"""The policy wants a person to approve the call and nobody can be asked."""
WAITING_FOR_APPROVAL: Final = "waiting_for_approval"
"""The call is parked until a person approves or declines it; the session waits meanwhile."""
DECLINED: Final = "declined"
"""A person declined the parked call; the message names who and why."""
CONFLICT: Final = "conflict"
"""The state changed under the request (another writer won); retry."""
TIMEOUT: Final = "timeout"
"""A service did not answer within the deadline."""
UNAVAILABLE: Final = "unavailable"
"""No instance of a service is running, or the bus is unreachable."""
SANDBOX_FAILED: Final = "sandbox_failed"
"""The sandbox could not be started (not the command inside it failing)."""
INTERNAL: Final = "internal"
"""An unexpected fault inside a service; its log has the detail, the wire never does."""
RATE_LIMITED: Final = "rate_limited"
"""The tenant made more calls per second than its quota: the message says when to retry."""
QUOTA_EXCEEDED: Final = "quota_exceeded"
"""The tenant (or token) holds as much as its cap allows (open sessions): the message names
the cap's setting and what frees room."""
UNCERTAIN: Final = "uncertain"
"""An identical earlier call got no answer (a timeout, a service died): it may or may not
have taken effect, so it is not made again."""
TOOL_CHANGED: Final = "tool_changed"
"""An upstream MCP tool is not what the session was offered any more (or is no longer
there, or no longer signed by its key): the call was not made."""
UPSTREAM_ERROR: Final = "upstream_error"
"""An upstream MCP server answered the request with a JSON-RPC error."""
PROGRAM_FAILED: Final = "program_failed"
"""A `run_code` program failed (an exception, a status other than 0): the message is its
output and its traceback."""
CANCELLED: Final = "cancelled"
"""Someone cancelled the call while it ran (the message names who): what it did before it
stopped stays done, so it is not made again under its call id."""
HOOK_BLOCKED: Final = "hook_blocked"
"""An operator's before-tool hook blocked the call (or failed to answer, which blocks too)."""


class ErrorReply(Message, frozen=True, kw_only=True, tag="error"):
    """A request that failed: a stable code and a sentence a person can act on."""

    code: ErrorCode
    message: Annotated[str, msgspec.Meta(max_length=4096)]
