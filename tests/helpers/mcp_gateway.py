"""The MCP gateway's plane and its operator requests: add a server, review its pins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.mcp import AddServer, McpReview, McpServerSpec, ReviewServer
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

__all__ = ["add", "mcp_plane", "output_text", "review"]


@asynccontextmanager
async def mcp_plane(
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    state_dir: Path,
    *,
    pin_recheck_s: float = 0.0,
) -> AsyncIterator[None]:
    """Policy, orchestrator and the mcp service (its pins in `state_dir`; a kept listing
    standing `pin_recheck_s` for the call-time check) until the block exits."""
    mcp = McpSettings(
        nats_url=bus_settings.nats_url,
        http_listen="127.0.0.1:0",
        state_dir=str(state_dir),
        mcp_pin_recheck_s=pin_recheck_s,
    )
    async with (
        run_service(policy_service, PolicySettings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        run_service(mcp_service, mcp),
    ):
        yield


async def add(client: Client, name: str, spec: McpServerSpec) -> McpReview:
    """`bastion mcp add NAME`: the server is started, looked at and pinned for review."""
    review: McpReview = await request(
        client, subjects.MCP_ADD, AddServer(name=name, spec=spec), McpReview, timeout_s=60
    )
    return review


async def review(client: Client, name: str, *, accept: bool = False) -> McpReview:
    """`bastion mcp review NAME` (`--accept` with `accept`): what changed since its pin."""
    found: McpReview = await request(
        client,
        subjects.MCP_REVIEW,
        ReviewServer(name=name, accept=accept),
        McpReview,
        timeout_s=60,
    )
    return found


def output_text(result: object) -> str:
    """The text of a call's result, which must be a `ToolOutput`."""
    assert isinstance(result, ToolOutput), result
    return result.text
