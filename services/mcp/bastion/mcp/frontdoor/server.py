"""The MCP endpoint put together: the SDK's low-level `Server` with Bastion's handlers, the
session manager that serves both protocol eras, the guard and the body limit in front of it,
and the notices of background tasks' ends."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from mcp.server.lowlevel.server import Server

from bastion.mcp.frontdoor.asking import Asking
from bastion.mcp.frontdoor.binding import Binding
from bastion.mcp.frontdoor.bodylimit import BodyLimit
from bastion.mcp.frontdoor.guard import McpGuard
from bastion.mcp.frontdoor.httpsettings import FrontDoor
from bastion.mcp.frontdoor.inflight import InFlight
from bastion.mcp.frontdoor.manager import DoorManager
from bastion.mcp.frontdoor.opening import Opening
from bastion.mcp.frontdoor.records import SessionRecords
from bastion.mcp.frontdoor.resources import ResourceHandlers
from bastion.mcp.frontdoor.revoking import Revocations, TokenCalls
from bastion.mcp.frontdoor.slots import SessionSlots
from bastion.mcp.frontdoor.taskends import NoticeTimes, TaskNotices
from bastion.mcp.frontdoor.tokens import TokenStore
from bastion.mcp.frontdoor.tools import ToolHandlers
from bastion.shared.bus import Client
from bastion.shared.version import VERSION

__all__ = ["McpEndpoint", "open_mcp_endpoint"]

BUS_TIMEOUT_S = 30.0
INSTRUCTIONS = (
    "Bastion runs your tool calls in a sandbox, under its operator's policy: a call may be "
    "refused, or wait for a person's approval (asked through elicitation when your client "
    "supports it). A refusal is a tool result with isError and a sentence that says why and "
    "what to do. The resources bastion://sessions/{id} hold each session's transcript."
)


@dataclass(frozen=True)
class McpEndpoint:
    """What `/mcp` is: the guarded ASGI app (the guard, then the body limit, then the SDK's
    manager), and the manager and the task notices to run in the app's lifespan."""

    app: McpGuard
    manager: DoorManager
    tokens: TokenStore
    binding: Binding
    notices: TaskNotices
    slots: SessionSlots
    revocations: Revocations

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The manager's task group, the task notices, the renewal of the sessions' slots
        and the revoked tokens' ends, for as long as the HTTP app runs (its lifespan)."""
        async with (
            self.manager.run(),
            self.notices.running(),
            self.slots.renewing(self.manager.held, self.manager.slotless),
            self.revocations.running(),
        ):
            yield


async def open_mcp_endpoint(client: Client, door: FrontDoor) -> McpEndpoint:
    """The endpoint, its buckets opened (created if missing)."""
    tokens = await TokenStore.open(client)
    records = await SessionRecords.open(client)
    slots = await SessionSlots.open(client, door.max_sessions_per_token, door.session_slot_s)
    binding = Binding(client, records, BUS_TIMEOUT_S)
    calls = TokenCalls()
    tools = ToolHandlers(
        client,
        binding,
        Asking(client, BUS_TIMEOUT_S, door.approval_wait_s),
        door.call_timeout_s,
        door.progress_every_s,
        calls,
    )
    resources = ResourceHandlers(client, binding, records)
    server: Server[object] = Server(
        "bastion",
        version=VERSION,
        title="Bastion",
        instructions=INSTRUCTIONS,
        on_list_tools=tools.list_tools,
        on_call_tool=tools.call_tool,
        on_list_resources=resources.list_resources,
        on_list_resource_templates=resources.list_templates,
        on_read_resource=resources.read,
    )
    manager = DoorManager(
        server,
        records=records,
        slots=slots,
        ended=binding.end,
        replica=secrets.token_hex(4),
        idle_timeout_s=door.session_idle_s,
        max_request_bytes=door.mcp_max_request_bytes,
    )
    return McpEndpoint(
        # the agent known first, then the body bounded, then an initialize cut to what is
        # kept, then a request's id held while it runs
        app=McpGuard(
            BodyLimit(
                Opening(InFlight(manager.handle_request)),
                door.mcp_max_request_bytes,
                door.mcp_body_read_s,
            ),
            door,
            tokens,
        ),
        manager=manager,
        tokens=tokens,
        binding=binding,
        notices=TaskNotices(
            client,
            manager,
            binding,
            NoticeTimes(gather_s=door.task_end_gather_s, every_s=door.task_end_every_s),
        ),
        slots=slots,
        revocations=Revocations(
            client=client,
            tokens=tokens,
            records=records,
            binding=binding,
            manager=manager,
            calls=calls,
            sweep_s=door.revoked_sweep_s,
        ),
    )
