"""A session's upstream MCP tools: offered at its start, called through the mcp service."""

from __future__ import annotations

from bastion.orchestrator.catalogue import UpstreamInput, upstream_tool
from bastion.proto import subjects
from bastion.proto.mcp import McpCall, McpCallResult, OfferTools, ToolOffer
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.shared.bus import Client, request
from bastion.shared.deadlines import UPSTREAM_MARGIN_S
from bastion.shared.errors import Unavailable

__all__ = ["call_upstream", "offer_upstream"]


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


async def call_upstream(
    client: Client,
    session: SessionInfo,
    tool: ToolSpec,
    tool_input: UpstreamInput,
    *,
    call_id: str,
    timeout_s: float,
) -> str:
    """The upstream's answer as the model sees it; a tool's own error is said first."""
    result: McpCallResult = await request(
        client,
        subjects.MCP_CALL,
        McpCall(
            tenant=session.tenant,
            session_id=session.session_id,
            call_id=call_id,
            server=tool.server,
            upstream_kind=tool.upstream_kind or "tool",
            tool=tool.upstream,
            digest=tool.digest,
            arguments=tool_input.arguments,
            can_ask=session.elicits,
        ),
        McpCallResult,
        timeout_s=(tool.call_timeout_s or timeout_s) + UPSTREAM_MARGIN_S,
    )
    if result.is_error:
        return f"the tool reported an error:\n{result.text}"
    return result.text
