"""Sending the cancel of one call of a session, as the front door does for an MCP client's
`notifications/cancelled` and the HTTP API's cancel route."""

from __future__ import annotations

import logging
from typing import Any, Final

import anyio
from mcp.server.context import ServerRequestContext

from bastion.proto import subjects
from bastion.proto.cancel import CancelAnswer, CancelCall
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError

__all__ = ["CANCEL_BY_CLOSING", "CANCEL_WAIT_S", "cancel_call", "peer_cancelled", "send_cancel"]

logger = logging.getLogger(__name__)

CANCEL_BY_CLOSING: Final = "2026-07-28"
"""The first MCP protocol version whose client cancels a request by closing its response
stream (the handler is then cancelled, as for `notifications/cancelled` before it)."""
CANCEL_WAIT_S: Final = 15.0
"""How long the front door waits for a cancel's answer (the orchestrator waits 5 s for
the call to stop)."""


async def send_cancel(client: Client, session_id: str, call_id: str, by: str) -> CancelAnswer:
    """What `session.<id>.cancel` answers for `call_id`, cancelled on behalf of `by`.

    Raises:
        RemoteError: `not_found` for an unknown session; Unavailable: no orchestrator.
    """
    answer: CancelAnswer = await request(
        client,
        subjects.session_cancel(session_id),
        CancelCall(call_id=call_id, by=by),
        CancelAnswer,
        timeout_s=CANCEL_WAIT_S,
    )
    return answer


async def cancel_call(client: Client, session_id: str, call_id: str, by: str) -> None:
    """Send the cancel for a call whose client gave up on it; a failure is logged (nobody
    waits for its answer)."""
    try:
        answer = await send_cancel(client, session_id, call_id, by)
    except BastionError as error:
        logger.warning("a call's cancel failed", extra={"code": error.code})
        return
    logger.info("a client cancelled its call", extra={"outcome": answer.outcome})


def peer_cancelled(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client cancelled this request, rather than the handler being cancelled
    for another reason (the server stopping): it sent `notifications/cancelled` (the SDK
    then cancels the handler; the low-level context does not carry the request's dispatch
    context that knows, its session holds it as the request's outbound channel), or, from
    protocol 2026-07-28 on, where a client cancels by closing the response stream and has
    no notifications, the stream was closed."""
    if ctx.protocol_version >= CANCEL_BY_CLOSING:
        return True
    dispatch = getattr(ctx.session, "_request_outbound", None)
    event = getattr(dispatch, "cancel_requested", None)
    return isinstance(event, anyio.Event) and event.is_set()
