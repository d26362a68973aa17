"""The mcp service's setup: its endpoints, refusing until their issue lands."""

from __future__ import annotations

from bastion.proto import subjects
from bastion.proto.stubs import McpCallRequest
from bastion.shared.placeholder import placeholder_service

__all__ = ["setup"]

setup = placeholder_service(
    "mcp",
    "Upstream MCP servers, reviewed and pinned, and the MCP front door.",
    issue=6,
    endpoints={"call": (subjects.MCP_CALL, McpCallRequest)},
)
