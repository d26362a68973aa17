"""Requests of the services whose capability lands in a later issue (egress, mcp).

Their shapes are the minimum a caller needs today; each service answers them with a typed
`not_implemented` error until its issue builds it, and may widen them (new fields last,
with defaults) when it does.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from bastion.proto._base import Identifier, Message, SessionId
from bastion.proto.vault import LeaseRequest  # built in issue 5; kept importable from here

__all__ = ["FetchRequest", "LeaseRequest", "McpCallRequest"]


class FetchRequest(Message, frozen=True, kw_only=True, tag="egress.fetch"):
    """Fetch a public page for a session; answered with an `egress.FetchedPage`."""

    session_id: SessionId
    url: Annotated[str, msgspec.Meta(min_length=1, max_length=8192)]
    format: str = "markdown"
    """`markdown`, `text` or `html`."""
    tenant: Annotated[str, msgspec.Meta(max_length=64)] = ""
    """Whose session: the connection is recorded in its audit log (issue 5)."""


class McpCallRequest(Message, frozen=True, kw_only=True, tag="mcp.call"):
    """Call a tool of an upstream MCP server for a session (issue 6)."""

    session_id: SessionId
    server: Identifier
    tool: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
