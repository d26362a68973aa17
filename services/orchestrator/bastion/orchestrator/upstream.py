"""A session's upstream MCP tools: offered at its start, called through the mcp service (told
first that the call is coming, so its pin check's listing starts early)."""

from __future__ import annotations

from typing import Any

import msgspec

from bastion.orchestrator.toolcall import Call
from bastion.proto import subjects
from bastion.proto.mcp import (
    McpCall,
    McpCallResult,
    McpPrefetch,
    OfferedTool,
    OfferTools,
    ToolOffer,
)
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.shared.bus import Client, request
from bastion.shared.codec import encode
from bastion.shared.deadlines import UPSTREAM_MARGIN_S
from bastion.shared.errors import Unavailable

__all__ = ["UpstreamInput", "call_upstream", "offer_upstream", "prefetch_upstream", "upstream_tool"]


class UpstreamInput(msgspec.Struct, frozen=True, kw_only=True):
    """The input of an upstream MCP tool: its arguments as given, checked by its server.

    Bounded by `ToolCall.input` (64 keys, the bus message's size); the arguments go to the
    server as they are, so the journal keys a call on exactly them.
    """

    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


def upstream_tool(offered: OfferedTool) -> ToolSpec:
    """A session's tool for an upstream MCP tool the mcp service offered."""
    return ToolSpec(**{name: getattr(offered, name) for name in ToolSpec.__struct_fields__})


async def offer_upstream(
    client: Client,
    tenant: str,
    session_id: str,
    servers: tuple[str, ...],
    timeout_s: float,
    *,
    can_ask: bool = False,
    skills_dir: str = "",
) -> tuple[tuple[ToolSpec, ...], tuple[str, ...]]:
    """The tools of `servers` the session may have, and what was withheld and why; with no
    mcp service answering, the session opens without them and is told so. `can_ask`: a
    client answers the servers' questions (only then are they offered elicitation);
    `skills_dir`: the session's, which no offered server's directory overlaps."""
    if not servers:
        return (), ()
    try:
        offer: ToolOffer = await request(
            client,
            subjects.MCP_OFFER,
            OfferTools(
                tenant=tenant,
                session_id=session_id,
                servers=servers,
                can_ask=can_ask,
                skills_dir=skills_dir,
            ),
            ToolOffer,
            timeout_s=timeout_s,
        )
    except Unavailable as error:
        return (), tuple(
            f"MCP server {name} is not offered: the mcp service did not answer ({error.message})"
            for name in servers
        )
    return tuple(upstream_tool(t) for t in offer.tools), offer.notices


async def prefetch_upstream(
    client: Client, session: SessionInfo, tool: ToolSpec, call_id: str
) -> None:
    """Tell the mcp service that a call of an upstream tool is coming, as soon as it is known
    (before its journal, policy decision, hooks and audit; again when a person approves it,
    as the first listing is from before the wait): the session's connection starts the
    tools listing the call's pin check awaits, and that round trip overlaps this service's
    own work. Published, never answered: an mcp service that does not hear it lists when
    the call comes."""
    if not tool.server or (tool.upstream_kind or "tool") != "tool":
        return
    ahead = McpPrefetch(
        tenant=session.tenant, session_id=session.session_id, call_id=call_id, server=tool.server
    )
    await client.publish(subjects.MCP_PREFETCH, encode(ahead))


async def call_upstream(call: Call, given: UpstreamInput) -> str:
    """The upstream's answer as the model sees it; a tool's own error is said first."""
    session, tool = call.session, call.tool
    result = await call.ask(
        subjects.MCP_CALL,
        McpCall(
            **call.whose(),
            call_id=call.call_id,
            server=tool.server,
            upstream_kind=tool.upstream_kind or "tool",
            tool=tool.upstream,
            digest=tool.digest,
            arguments=given.arguments,
            can_ask=session.elicits,
        ),
        McpCallResult,
        timeout_s=(tool.call_timeout_s or call.timeout_s) + UPSTREAM_MARGIN_S,
    )
    if result.is_error:
        return f"the tool reported an error:\n{result.text}"
    return result.text
