"""Upstream servers' questions during a call, put to the MCP client's person (and model).

While a `tools/call` runs for a client that takes form elicitation, the front door answers
`mcp.elicit.<session>`: each `ElicitQuestion` becomes an elicitation of the client, and its
answer an `ElicitAnswer`. For a client that takes sampling it also answers
`mcp.sample.<session>`: a completion asked by an upstream server the operator allowed to
sample, within that allowance. With nobody subscribed the mcp service declines by itself.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError, NoBackChannelError
from nats.aio.msg import Msg

from bastion.mcp.frontdoor.asking import takes_form_elicitation
from bastion.proto import subjects
from bastion.proto.mcp import ElicitAnswer, ElicitQuestion, SampleAnswer, SampleQuestion
from bastion.shared.background import in_background
from bastion.shared.bus import Client, answer
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BadRequest

__all__ = ["relaying"]

logger = logging.getLogger(__name__)

_DECLINE = ElicitAnswer(action="decline")
_BUSY = SampleAnswer(refused="the client is busy with other questions of this session")
_ELICIT = subjects.mcp_elicit("")
_AS = "mcp"
"""The NATS user the front door answers as (it runs in the mcp service): a person's answer
may come after the reply window, so it goes on the asker's reply subject."""


@asynccontextmanager
async def relaying(
    client: Client, ctx: ServerRequestContext[Any, Any], session_id: str
) -> AsyncIterator[None]:
    """Relay the session's upstream questions to the client for as long as the block runs."""
    asks = takes_form_elicitation(ctx)
    samples = takes_sampling(ctx)
    if not asks and not samples:
        yield
        return
    arrived, questions = anyio.create_memory_object_stream[Msg](16)

    async def deliver(msg: Msg) -> None:
        try:
            arrived.send_nowait(msg)
        except anyio.WouldBlock:
            busy = _DECLINE if msg.subject.startswith(_ELICIT) else _BUSY
            await answer(client, msg, encode(busy), _AS)

    async def answer_each() -> None:
        async with questions:
            async for msg in questions:
                if msg.subject.startswith(_ELICIT):
                    await answer(client, msg, encode(await _ask(ctx, msg)), _AS)
                else:
                    await answer(client, msg, encode(await _complete(ctx, msg)), _AS)

    subscriptions = []
    if asks:
        subscriptions.append(await client.subscribe(subjects.mcp_elicit(session_id), cb=deliver))
    if samples:
        subscriptions.append(await client.subscribe(subjects.mcp_sample(session_id), cb=deliver))
    try:
        async with in_background(answer_each):
            yield
    finally:
        for subscription in subscriptions:
            await subscription.unsubscribe()
        arrived.close()


def takes_sampling(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared sampling and this request can carry a request to it."""
    capabilities = ctx.session.client_capabilities
    return (
        capabilities is not None
        and capabilities.sampling is not None
        and ctx.session.can_send_request
    )


async def _complete(ctx: ServerRequestContext[Any, Any], msg: Msg) -> SampleAnswer:
    """The client's model's completion of an upstream server's request."""
    try:
        question: SampleQuestion = decode(msg.data, SampleQuestion)
        params = types.CreateMessageRequestParams.model_validate_json(question.request_json)
    except (BadRequest, ValueError):
        return SampleAnswer(refused="the sampling request was not one")
    try:
        with warnings.catch_warnings():
            # Deprecated by protocol 2026-07-28, which still has it: relayed only for a
            # server the operator allowed to sample.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            result = await ctx.session.create_message(
                params.messages,
                max_tokens=params.max_tokens,
                system_prompt=params.system_prompt,
                temperature=params.temperature,
                stop_sequences=params.stop_sequences,
                model_preferences=params.model_preferences,
                related_request_id=ctx.request_id,
            )
    except (MCPError, NoBackChannelError) as error:
        return SampleAnswer(refused=f"the client did not complete it: {str(error)[:300]}")
    logger.info("upstream sampling relayed", extra={"server": question.server})
    return SampleAnswer(result_json=result.model_dump_json(by_alias=True, exclude_none=True))


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
