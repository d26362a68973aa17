"""The egress service's setup: the proxy listening, and its endpoints on the bus
(`egress.grant`, `egress.connections`, `egress.fetch`, `egress.search`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from bastion.egress.connlog import ConnectionRecorder
from bastion.egress.dial import Dialer
from bastion.egress.fetch import Fetcher
from bastion.egress.grants import GrantStore
from bastion.egress.pinned import Hop
from bastion.egress.pipe import Bounds
from bastion.egress.providers import provider_from
from bastion.egress.proxy import EgressProxy
from bastion.egress.resolver import Resolver, SystemResolver
from bastion.egress.search import Searcher
from bastion.egress.settings import EgressSettings
from bastion.proto import subjects
from bastion.proto.egress import (
    ConnectionLog,
    ConnectionsRequest,
    EgressGrant,
    FetchedPage,
    GrantRequest,
    SearchRequest,
    SearchResults,
)
from bastion.proto.stubs import FetchRequest
from bastion.shared.bus import Client
from bastion.shared.netclass import parse_ranges
from bastion.shared.service import RequestContext, Service
from bastion.shared.version import VERSION

__all__ = ["egress_service", "keep_chars"]

Setup = Callable[[Client, EgressSettings], AbstractAsyncContextManager[Service]]


def keep_chars(settings: EgressSettings, max_payload: int) -> int:
    """Characters of a cut page's whole text a reply may carry: the setting, and no more
    than fits the bus's message beside the reply's own text (at 4 bytes a character)."""
    room = (max_payload - 16 * 1024) // 4 - settings.egress_fetch_max_chars
    return max(0, min(settings.egress_fetch_keep_max_chars, room))


def egress_service(
    resolver: Resolver | None = None, environ: Mapping[str, str] | None = None
) -> Setup:
    """The service's setup; `resolver` replaces the system's (tests give fixed answers),
    `environ` the process's environment where the search provider's key is read."""

    @asynccontextmanager
    async def setup(client: Client, settings: EgressSettings) -> AsyncIterator[Service]:
        dialer = Dialer(
            resolver=resolver or SystemResolver(settings.egress_resolve_timeout_s),
            allowed=parse_ranges(settings.egress_allow_ranges),
            upstream=settings.egress_upstream,
            connect_timeout_s=settings.egress_connect_timeout_s,
        )
        recorder = await ConnectionRecorder.open(client, settings.egress_grant_max_ttl_s * 2)
        grants = await GrantStore.open(client, settings.egress_grant_max_ttl_s, proxy="")
        proxy = EgressProxy(
            grants,
            recorder,
            dialer,
            Bounds(
                settings.egress_max_bytes,
                settings.egress_max_duration_s,
                settings.egress_idle_timeout_s,
            ),
        )
        fetcher = Fetcher(
            dialer,
            settings.egress_fetch_max_bytes,
            settings.egress_fetch_max_chars,
            settings.egress_fetch_timeout_s,
            keep_chars(settings, client.max_payload),
        )
        provider = provider_from(
            settings.search,
            os.environ if environ is None else environ,
            settings.egress_brave_url,
            settings.egress_tavily_url,
        )
        searcher = Searcher(dialer, provider, settings.egress_search_timeout_s)

        async def grant(request: GrantRequest, _: RequestContext) -> EgressGrant:
            return await grants.issue(request)

        async def connections(request: ConnectionsRequest, _: RequestContext) -> ConnectionLog:
            if request.revoke:
                await grants.revoke(request.grant_id)
            return await recorder.connections(request.grant_id)

        async def fetch(request: FetchRequest, _: RequestContext) -> FetchedPage:
            hops: list[Hop] = []
            try:
                return await fetcher.fetch(request.url, request.format, hops)
            finally:
                await record(request.session_id, request.tenant, hops, "fetch_url")

        async def search(request: SearchRequest, _: RequestContext) -> SearchResults:
            hops: list[Hop] = []
            try:
                return await searcher.search(request, hops)
            finally:
                await record(request.session_id, request.tenant, hops, "web_search")

        async def record(session_id: str, tenant: str, hops: list[Hop], tool: str) -> None:
            for hop in hops:
                await recorder.record(
                    session_id=session_id,
                    tenant=tenant or "default",
                    target=hop.target,
                    refused=hop.refused,
                    tool=tool,
                )

        async with proxy.serving(settings.egress_listen) as address:
            grants.proxy = settings.egress_advertise or address
            service = Service(
                "egress",
                VERSION,
                "The only way out: the filtering proxy for sandboxes, fetch_url and web_search.",
            )
            service.add_endpoint("grant", subjects.EGRESS_GRANT, GrantRequest, grant)
            service.add_endpoint(
                "connections", subjects.EGRESS_CONNECTIONS, ConnectionsRequest, connections
            )
            service.add_endpoint("fetch", subjects.EGRESS_FETCH, FetchRequest, fetch)
            service.add_endpoint("search", subjects.EGRESS_SEARCH, SearchRequest, search)
            yield service

    return setup
