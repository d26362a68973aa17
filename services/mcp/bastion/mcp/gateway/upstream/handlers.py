"""Questions an upstream asks during a call (elicitation, sampling): relayed or declined.

A form asking for a secret is declined without asking anyone (`secretform`); so is every
question past the call's budget. When no one can answer (no elicit handler) the server is
not offered elicitation at all. Sampling is refused (a JSON-RPC error) when no handler is
given.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pydantic
from mcp import types
from mcp.client.session import ClientRequestContext

from bastion.mcp.gateway.upstream.secretform import asks_for_secret
from bastion.proto.mcp import MAX_DESCRIPTION, MAX_SCHEMA_JSON, ElicitAnswer, ElicitQuestion

__all__ = ["Asking", "ElicitHandler", "SampleHandler", "UpstreamHandlers"]

logger = logging.getLogger(__name__)

ElicitHandler = Callable[[ElicitQuestion], Awaitable[ElicitAnswer]]
SampleHandler = Callable[
    [types.CreateMessageRequestParams], Awaitable[types.CreateMessageResult | types.ErrorData]
]
"""Completes a server's sampling request, or says why not (an `ErrorData` the server gets)."""

_DECLINE = types.ElicitResult(action="decline")


@dataclass(frozen=True)
class UpstreamHandlers:
    """Who answers a server's questions; None: elicitation is not declared to the server,
    and sampling is refused."""

    elicit: ElicitHandler | None = None
    sample: SampleHandler | None = None
    session_id: str = ""
    """The session the questions are asked for: it is named in each `ElicitQuestion`."""


class Asking:
    """One connection's answers to its server's questions, at most `max_questions` a call."""

    def __init__(self, server: str, handlers: UpstreamHandlers, max_questions: int) -> None:
        self._server = server
        self._handlers = handlers
        self._max_questions = max_questions
        self._asked = 0

    def new_call(self) -> None:
        """A call starts: its questions are counted from zero."""
        self._asked = 0

    def _within_budget(self) -> bool:
        self._asked += 1
        return self._asked <= self._max_questions

    def _question(self, params: types.ElicitRequestParams) -> ElicitQuestion | None:
        """The question to relay, or None when it is declined unasked."""
        message = params.message[:MAX_DESCRIPTION]
        if isinstance(params, types.ElicitRequestURLParams):
            return ElicitQuestion(
                session_id=self._handlers.session_id,
                server=self._server,
                message=message,
                url=params.url[:8192],
            )
        schema = params.requested_schema
        schema_json = json.dumps(schema, ensure_ascii=False)
        if asks_for_secret(schema, params.message) or len(schema_json.encode()) > MAX_SCHEMA_JSON:
            return None
        return ElicitQuestion(
            session_id=self._handlers.session_id,
            server=self._server,
            message=message,
            schema_json=schema_json,
        )

    async def elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """The SDK's `elicitation_callback`: relay, or decline."""
        elicit = self._handlers.elicit
        if elicit is None or not self._within_budget():
            return _DECLINE
        question = self._question(params)
        if question is None:
            logger.info("declined a form from MCP server %s that asks for a secret", self._server)
            return _DECLINE
        try:
            answer = await elicit(question)
        except Exception:
            logger.exception("relaying a question of MCP server %s failed", self._server)
            return _DECLINE
        if answer.action != "accept":
            return types.ElicitResult(action=answer.action)
        try:
            return types.ElicitResult(action="accept", content=answer.content)
        except pydantic.ValidationError:
            # The answer came over the bus: content the protocol cannot carry (a nested
            # object) is not sent on, and the question counts as declined.
            logger.warning("an answer to MCP server %s was not a form's answer", self._server)
            return _DECLINE

    async def sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        """The SDK's `sampling_callback`: only given to the SDK when there is a handler."""
        sample = self._handlers.sample
        if sample is None or not self._within_budget():
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message="sampling is not allowed for this server now",
            )
        return await sample(params)
