"""`tools/list` and `tools/call`: the Bastion session's tools, and its calls' answers as MCP.

A tool's effect becomes its annotations. A call goes to `session.<id>.call` (a client's
`notifications/cancelled` of it sends `session.<id>.cancel`); its output is
text content, a refusal (denied, declined, uncertain...) a result with `isError` and the
sentence, so the model can read it; what is wrong with the request itself (an unknown tool,
Bastion unreachable) is a JSON-RPC error. A result's `_meta` names the Bastion session and
the call id (`bastion.mcp.frontdoor.callids`: a retried request keeps its call id).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import msgspec
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)

from bastion.mcp.frontdoor.asking import Asking
from bastion.mcp.frontdoor.binding import Binding
from bastion.mcp.frontdoor.callids import call_id_of
from bastion.mcp.frontdoor.cancelling import cancel_call, peer_cancelled
from bastion.mcp.frontdoor.guard import Agent, agent_of
from bastion.mcp.frontdoor.relay import relaying
from bastion.mcp.frontdoor.revoking import TokenCalls
from bastion.mcp.frontdoor.streaming import reporting, wants_progress
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.session import ToolSpec
from bastion.proto.tools import CallParked, CallResult, ToolCall
from bastion.shared.bus import Client, request
from bastion.shared.errors import (
    BastionError,
    InvalidInput,
    NotFound,
    RemoteError,
    Unavailable,
)
from bastion.shared.telemetry import annotate

__all__ = ["ToolHandlers", "mcp_error", "request_agent", "tool_of"]

_PROTOCOL_CODES: Final = {codes.UNKNOWN_TOOL, codes.BAD_REQUEST, codes.NOT_FOUND}
"""The codes of a request that failed before any call was made (its session, its state)."""
_CALL_PROTOCOL_CODES: Final = {codes.UNKNOWN_TOOL, codes.BAD_REQUEST}
"""The codes of a call's answer that say the request itself was wrong; every other answer
is the tool's, for the model to read — a file that is not there (`not_found`) among them."""
_ANY_OBJECT: Final[dict[str, Any]] = {"type": "object"}


def _meta_of(spec: ToolSpec) -> dict[str, Any]:
    meta: dict[str, Any] = {"bastion/effect": spec.effect}
    if spec.server:
        meta["bastion/server"] = spec.server
    return meta


def tool_of(spec: ToolSpec) -> Tool:
    """A session's tool as MCP lists it: what its effect is says its annotations."""
    schema = _ANY_OBJECT
    if spec.input_schema_json:
        given = json.loads(spec.input_schema_json)
        schema = given if isinstance(given, dict) else _ANY_OBJECT
    return Tool(
        name=spec.name,
        description=spec.description,
        input_schema=schema,
        annotations=ToolAnnotations(
            read_only_hint=spec.effect == "read",
            destructive_hint=spec.effect in ("write", "spend"),
            open_world_hint=spec.effect in ("external", "spend"),
        ),
        _meta=_meta_of(spec),
    )


def mcp_error(error: BastionError) -> MCPError:
    """A failure that is not the tool's answer, as the JSON-RPC error a client shows."""
    if isinstance(error, Unavailable):
        return MCPError(
            code=INTERNAL_ERROR,
            message=f"Bastion does not answer ({error.message}): is it running? "
            "(`bastion status` says)",
            data={"code": error.code},
        )
    if error.code in _PROTOCOL_CODES or isinstance(error, NotFound | InvalidInput):
        return MCPError(code=INVALID_PARAMS, message=error.message, data={"code": error.code})
    return MCPError(code=INTERNAL_ERROR, message=error.message, data={"code": error.code})


def request_agent(ctx: ServerRequestContext[Any, Any]) -> tuple[Agent, str | None]:
    """The agent of the request, and its MCP session id (None: a stateless request)."""
    http = ctx.request
    assert http is not None, "the front door serves MCP over HTTP only"
    return agent_of(http.scope), http.headers.get("mcp-session-id")


def _text(result: CallResult, meta: dict[str, Any]) -> CallToolResult:
    if isinstance(result, ErrorReply | CallParked):
        code = result.code if isinstance(result, ErrorReply) else codes.WAITING_FOR_APPROVAL
        return CallToolResult(
            content=[TextContent(type="text", text=f"{code}: {result.message}")],
            is_error=True,
            _meta=meta,
        )
    return CallToolResult(
        content=[TextContent(type="text", text=result.text)], is_error=False, _meta=meta
    )


def _call_meta(session_id: str, call_id: str | None) -> dict[str, Any]:
    """What a result's `_meta` says of its call: the Bastion session and call ids, which
    the HTTP API's cancel route and the session's transcript name it by."""
    meta = {"bastion/session_id": session_id}
    if call_id is not None:
        meta["bastion/call_id"] = call_id
    return meta


@dataclass(frozen=True)
class ToolHandlers:
    """The two tool methods, acting in the request's Bastion session."""

    client: Client
    binding: Binding
    asking: Asking
    call_timeout_s: float
    progress_every_s: float = 2.0
    """How often a client that asked for progress is told a call still runs."""
    calls: TokenCalls = field(default_factory=TokenCalls)
    """The calls running here, by token: a revoked token's are cancelled."""

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        agent, mcp_session_id = request_agent(ctx)
        try:
            session_id = await self.binding.session_of(agent, mcp_session_id)
            info = await self.binding.info(session_id)
        except BastionError as error:
            raise mcp_error(error) from None
        return ListToolsResult(tools=[tool_of(spec) for spec in info.tools])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        agent, mcp_session_id = request_agent(ctx)
        if params.request_state is not None:
            return await self._resume(agent, mcp_session_id, params)
        call_id = call_id_of(mcp_session_id, ctx.request_id, params.name, params.arguments)
        try:
            call = msgspec.convert(
                {
                    "tool": params.name,
                    "input": params.arguments or {},
                    "call_id": call_id,
                    "stream": wants_progress(ctx),
                },
                ToolCall,
            )
        except msgspec.ValidationError:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"a call names a tool (letters, digits, _ and -, at most 128) and "
                f"gives it at most 64 arguments: {params.name[:40]!r} with "
                f"{len(params.arguments or {})} arguments is not one; tools/list shows the "
                "tools",
            ) from None
        try:
            session_id = await self.binding.session_of(agent, mcp_session_id)
            async with (
                reporting(ctx, self.client, session_id, call, self.progress_every_s),
                relaying(self.client, ctx, session_id),
            ):
                result = await self._call(ctx, agent, session_id, call)
        except BastionError as error:
            raise mcp_error(error) from None
        if isinstance(result, InputRequiredResult):
            return result
        return await self._answer(agent, mcp_session_id, session_id, result, call_id)

    async def _resume(
        self, agent: Agent, mcp_session_id: str | None, params: CallToolRequestParams
    ) -> CallToolResult:
        """A call that comes back with the person's answer its approval asked for."""
        assert params.request_state is not None
        try:
            session_id = await self.binding.session_of(agent, mcp_session_id)
            result = await self.asking.resume(
                session_id,
                params.request_state,
                params.input_responses,
                by=f"mcp:{agent.info.agent}",
            )
        except BastionError as error:
            raise mcp_error(error) from None
        call_id = None if isinstance(result, ErrorReply) else result.call_id
        return await self._answer(agent, mcp_session_id, session_id, result, call_id)

    async def _answer(
        self,
        agent: Agent,
        mcp_session_id: str | None,
        session_id: str,
        result: CallResult,
        call_id: str | None,
    ) -> CallToolResult:
        if isinstance(result, ErrorReply) and result.code == codes.SESSION_CLOSED:
            await self.binding.closed(agent, mcp_session_id, session_id)
        if isinstance(result, ErrorReply) and result.code in _CALL_PROTOCOL_CODES:
            raise mcp_error(RemoteError(result.code, result.message))
        return _text(result, _call_meta(session_id, call_id))

    async def _call(
        self, ctx: ServerRequestContext[Any, Any], agent: Agent, session_id: str, call: ToolCall
    ) -> CallResult | InputRequiredResult:
        assert call.call_id is not None
        try:
            # The SDK's OpenTelemetryMiddleware made this request's span (continuing the
            # `traceparent` of the request's `_meta`, else a new trace): the call's root.
            annotate(session_id=session_id, tool=call.tool)
            with self.calls.holding(agent.token_hash, session_id, call.call_id):
                result: CallResult = await request(
                    self.client,
                    subjects.session_call(session_id),
                    call,
                    CallResult,
                    timeout_s=self.call_timeout_s,
                )
        except anyio.get_cancelled_exc_class():
            if peer_cancelled(ctx):  # the client's `notifications/cancelled`, not a hang-up
                with anyio.CancelScope(shield=True):
                    await cancel_call(
                        self.client, session_id, call.call_id, f"mcp:{agent.info.agent}"
                    )
            raise
        except RemoteError as refused:
            return refused.to_reply()
        if isinstance(result, CallParked):
            return await self.asking.settle(ctx, result, by=f"mcp:{agent.info.agent}")
        return result
