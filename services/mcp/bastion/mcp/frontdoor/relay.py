"""Upstream servers' questions during a call, put to the MCP client's person.

While a `tools/call` runs for a client that takes form elicitation, the front door answers
`mcp.elicit.<session>`: each `ElicitQuestion` becomes an elicitation of the client, and its
answer an `ElicitAnswer`. With nobody subscribed the mcp service declines by itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError
from nats.aio.msg import Msg

from bastion.mcp.frontdoor.asking import takes_form_elicitation
from bastion.proto import subjects
from bastion.proto.mcp import ElicitAnswer, ElicitQuestion
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BadRequest

__all__ = ["relaying"]

logger = logging.getLogger(__name__)

_DECLINE = ElicitAnswer(action="decline")


@asynccontextmanager
async def relaying(
    client: Client, ctx: ServerRequestContext[Any, Any], session_id: str
) -> AsyncIterator[None]:
    """Relay the session's upstream questions to the client for as long as the block runs."""
    if not takes_form_elicitation(ctx):
        yield
        return
    arrived, questions = anyio.create_memory_object_stream[Msg](16)

    async def deliver(msg: Msg) -> None:
        try:
            arrived.send_nowait(msg)
        except anyio.WouldBlock:
            await msg.respond(encode(_DECLINE))

    async def answer_each() -> None:
        async with questions:
            async for msg in questions:
                await msg.respond(encode(await _ask(ctx, msg)))

    subscription = await client.subscribe(subjects.mcp_elicit(session_id), cb=deliver)
    try:
        async with anyio.create_task_group() as relay:
            relay.start_soon(answer_each)
            try:
                yield
            finally:
                relay.cancel_scope.cancel()
    finally:
        await subscription.unsubscribe()
        arrived.close()


async def _ask(ctx: ServerRequestContext[Any, Any], msg: Msg) -> ElicitAnswer:
    try:
        question: ElicitQuestion = decode(msg.data, ElicitQuestion)
        schema = json.loads(question.schema_json) if question.schema_json else None
    except (BadRequest, ValueError):
        return _DECLINE
    if not isinstance(schema, dict):
        return _DECLINE  # a URL request: this front door relays forms only
    try:
        result = await ctx.session.elicit_form(
            message=f"The MCP server {question.server} asks: {question.message}",
            requested_schema=schema,
            related_request_id=ctx.request_id,
        )
    except (MCPError, NoBackChannelError, ValueError):
        return _DECLINE
    logger.info("upstream question relayed", extra={"server": question.server})
    return ElicitAnswer(action=result.action, content=dict(result.content or {}))
