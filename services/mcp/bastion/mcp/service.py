"""The mcp service's setup: the front door's HTTP API and MCP endpoint, agents' token
endpoints, and `mcp.call` refusing until issue 6."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bastion.mcp.frontdoor.server import open_mcp_endpoint
from bastion.mcp.frontdoor.tokenapi import add_token_endpoints
from bastion.mcp.httpapp import build_app
from bastion.mcp.httpserver import serving_http
from bastion.mcp.httpsettings import McpSettings, front_door_of
from bastion.proto import subjects
from bastion.proto.mcp import McpCall
from bastion.shared.bus import Client
from bastion.shared.placeholder import placeholder_service
from bastion.shared.service import Service

__all__ = ["McpSettings", "setup"]

logger = logging.getLogger(__name__)

_upstream = placeholder_service(
    "mcp",
    "Upstream MCP servers, reviewed and pinned, and the MCP front door.",
    issue=6,
    endpoints={"call": (subjects.MCP_CALL, McpCall)},
)


@asynccontextmanager
async def setup(client: Client, settings: McpSettings) -> AsyncIterator[Service]:
    """The service, with the front door serving HTTP for as long as it runs.

    Raises:
        UnsafeListen, UnsafeTokensFile: the front door's settings are not safe to serve.
    """
    door = front_door_of(settings)
    endpoint = await open_mcp_endpoint(client, door)
    app = build_app(client, door, endpoint)
    async with (
        serving_http(app, door.host, door.port, settings.drain_timeout_s) as port,
        _upstream(client, settings) as service,
    ):
        add_token_endpoints(service, endpoint.tokens, endpoint.binding.token_revoked)
        logger.info(
            "front door listening",
            extra={"url": f"http://{door.host}:{port}", "tokens": len(door.tokens)},
        )
        yield service
