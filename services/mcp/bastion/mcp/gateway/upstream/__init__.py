"""Bastion as an MCP client: connections to upstream servers, bounded and contained.

`open_upstream(spec, …)` starts a stdio server (in bubblewrap, in Docker, or unsandboxed) or
reaches an HTTP one (Streamable HTTP, or the legacy HTTP+SSE transport, through the egress proxy),
finds which era of MCP it speaks, and yields an `Upstream` to list and call. Nothing an
upstream sends is trusted or unbounded: a message over `UpstreamLimits.max_message_bytes`,
malformed JSON-RPC, silence past a timeout or the server's death ends the connection, and
a call caught in it is `UpstreamNoAnswer` (uncertain: it may have taken effect).

Modules: `connect` (open_upstream, era discovery, transport fallback, watching for tool
changes), `upstream` (the connection's requests), `listing` (its tools listings, kept and ahead),
`stdio` and `lines` (the bounded stdio transport), `launch` (the process and its sandbox),
`http` and `capped` (HTTP transports, bounded bodies), `egress` (the route out), `handlers`
and `secretform` (questions a server asks), `link` (a connection's state), `limits`,
`errors`.
"""

from __future__ import annotations

from bastion.mcp.gateway.upstream.connect import open_upstream
from bastion.mcp.gateway.upstream.egress import (
    EgressRoute,
    grant_for,
    host_and_port,
    is_loopback_url,
)
from bastion.mcp.gateway.upstream.errors import (
    UpstreamNoAnswer,
    UpstreamRefused,
    UpstreamUnreachable,
)
from bastion.mcp.gateway.upstream.handlers import ElicitHandler, SampleHandler, UpstreamHandlers
from bastion.mcp.gateway.upstream.limits import UpstreamLimits
from bastion.mcp.gateway.upstream.listing import Ahead
from bastion.mcp.gateway.upstream.secretform import asks_for_secret
from bastion.mcp.gateway.upstream.upstream import Upstream

__all__ = [
    "Ahead",
    "EgressRoute",
    "ElicitHandler",
    "SampleHandler",
    "Upstream",
    "UpstreamHandlers",
    "UpstreamLimits",
    "UpstreamNoAnswer",
    "UpstreamRefused",
    "UpstreamUnreachable",
    "asks_for_secret",
    "grant_for",
    "host_and_port",
    "is_loopback_url",
    "open_upstream",
]
