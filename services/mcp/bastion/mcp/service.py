"""The mcp service's entry point: upstream servers (added, reviewed, offered, called) and
agents' tokens on the bus; the front door's HTTP API and MCP endpoint beside them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from nats.aio.msg import Msg

from bastion.mcp.frontdoor.httpapp import build_app
from bastion.mcp.frontdoor.httpserver import serving_http
from bastion.mcp.frontdoor.httpsettings import front_door_of
from bastion.mcp.frontdoor.server import open_mcp_endpoint
from bastion.mcp.frontdoor.tokenapi import add_token_endpoints
from bastion.mcp.gateway.gateway import Gateway
from bastion.mcp.gateway.pool import running_pool
from bastion.mcp.gateway.registry import Registry
from bastion.mcp.gateway.values import ValueSource
from bastion.mcp.settings import McpSettings
from bastion.proto import subjects
from bastion.proto.events import SessionClosed
from bastion.proto.mcp import (
    AddServer,
    BrowseServer,
    ListServers,
    McpCall,
    McpPrefetch,
    OfferTools,
    RemoveServer,
    ReviewServer,
)
from bastion.shared.bus import Client
from bastion.shared.cancelling import listen
from bastion.shared.codec import decode
from bastion.shared.errors import BastionError
from bastion.shared.leasing import LeaseClient, lease_key
from bastion.shared.service import Service
from bastion.shared.version import VERSION

__all__ = ["mcp_service"]

logger = logging.getLogger(__name__)


def _endpoints(service: Service, gateway: Gateway) -> None:
    service.add_endpoint("add", subjects.MCP_ADD, AddServer, gateway.add)
    service.add_endpoint("review", subjects.MCP_REVIEW, ReviewServer, gateway.review)
    service.add_endpoint("list", subjects.MCP_LIST, ListServers, gateway.list)
    service.add_endpoint("remove", subjects.MCP_REMOVE, RemoveServer, gateway.remove)
    service.add_endpoint("browse", subjects.MCP_BROWSE, BrowseServer, gateway.browse)
    service.add_endpoint("offer", subjects.MCP_OFFER, OfferTools, gateway.offer)
    service.add_endpoint("call", subjects.MCP_CALL, McpCall, gateway.call)


@asynccontextmanager
async def mcp_service(client: Client, settings: McpSettings) -> AsyncIterator[Service]:
    """The service, with the front door serving HTTP for as long as it runs.

    Raises:
        UnsafeListen, UnsafeTokensFile: the front door's settings are not safe to serve.
    """
    door = front_door_of(settings)
    endpoint = await open_mcp_endpoint(client, door)
    app = build_app(client, door, endpoint)
    leases = LeaseClient(client, lease_key(settings.mcp_key_file), settings.request_timeout_s)
    registry = await Registry.open(client)
    async with running_pool(settings.mcp_idle_s) as pool, anyio.create_task_group() as following:
        await following.start(registry.follow, pool.close_server)
        gateway = Gateway(
            client,
            registry,
            pool,
            ValueSource(client, leases, settings.request_timeout_s),
            elicit_timeout_s=settings.mcp_elicit_timeout_s,
            grant_ttl_s=settings.mcp_idle_s + 60,
            state_dir=settings.state_dir,
            pin_recheck_s=settings.mcp_pin_recheck_s,
        )
        await listen(client, gateway.running)

        async def session_closed(message: Msg) -> None:
            try:
                event = decode(message.data, SessionClosed)
            except BastionError:
                logger.warning("an event on the session_closed subject was not one")
                return
            gateway.session_closed(event.session_id)

        async def prefetch(message: Msg) -> None:
            try:
                gateway.prefetch(decode(message.data, McpPrefetch))
            except BastionError:
                logger.warning("a message on the prefetch subject was not one")

        closed = await client.subscribe(subjects.event("session_closed", "*"), cb=session_closed)
        # Every replica hears it (no queue group): the one holding the session's connection
        # lists ahead; the call, whichever replica it reaches, lists for itself otherwise.
        ahead = await client.subscribe(subjects.MCP_PREFETCH, cb=prefetch)
        service = Service(
            "mcp", VERSION, "Upstream MCP servers, reviewed and pinned, and the MCP front door."
        )
        _endpoints(service, gateway)
        add_token_endpoints(
            service,
            client,
            endpoint.tokens,
            gateway.check_offerable,
            endpoint.revocations.revoked,
        )
        try:
            async with serving_http(app, door.host, door.port, settings.drain_timeout_s) as port:
                logger.info(
                    "front door listening",
                    extra={"url": f"http://{door.host}:{port}", "tokens": len(door.tokens)},
                )
                yield service
        finally:
            await ahead.unsubscribe()
            await closed.unsubscribe()
            following.cancel_scope.cancel()
