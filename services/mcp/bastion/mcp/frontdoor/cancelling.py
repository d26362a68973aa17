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

__all__ = ["CANCEL_WAIT_S", "cancel_call", "peer_cancelled", "send_cancel"]

logger = logging.getLogger(__name__)

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
    """Whether the client sent `notifications/cancelled` for this request (the SDK then
    cancels its handler), rather than the handler being cancelled for another reason (the
    server stopping). The low-level context does not carry the request's dispatch context
    that knows; its session holds it as the request's outbound channel."""
    dispatch = getattr(ctx.session, "_request_outbound", None)
    event = getattr(dispatch, "cancel_requested", None)
    return isinstance(event, anyio.Event) and event.is_set()
