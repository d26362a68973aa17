"""The bus endpoints `bastion token create|list|revoke` talk to."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bastion.mcp.frontdoor.tokens import TokenStore, opening_of
from bastion.proto import subjects
from bastion.proto.frontdoor import (
    CreateToken,
    ListTokens,
    RevokeToken,
    TokenCreated,
    TokenList,
    TokenRevoked,
)
from bastion.proto.session import OpeningChecked
from bastion.shared.bus import Client, request
from bastion.shared.service import RequestContext, Service

__all__ = ["ServersCheck", "add_token_endpoints"]

logger = logging.getLogger(__name__)


ServersCheck = Callable[[str, tuple[str, ...], str], Awaitable[None]]
"""`check(tenant, servers, skills_dir)`: refuses upstream servers a session could not be
offered (`Gateway.check_offerable`)."""

CHECK_TIMEOUT_S = 30.0
"""How long the orchestrator may take to check a profile (its sandbox check included)."""


def add_token_endpoints(
    service: Service,
    client: Client,
    store: TokenStore,
    servers: ServersCheck,
    revoked: Callable[[str], Awaitable[None]],
) -> None:
    """Serve the token operations on `service`. A token is minted only once its profile
    passed the checks a session's opening makes: the orchestrator's (`session.check`, the
    sandbox's included) and `servers`'. `revoked(token_hash)` is awaited after a token is
    revoked (it ends every MCP session of the token: `bastion.mcp.frontdoor.revoking`)."""

    async def create(ask: CreateToken, _context: RequestContext) -> TokenCreated:
        await request(
            client,
            subjects.SESSION_CHECK,
            opening_of(ask),
            OpeningChecked,
            timeout_s=CHECK_TIMEOUT_S,
        )
        await servers(ask.tenant, ask.mcp, ask.skills_dir or "")
        created = await store.create(ask)
        logger.info(
            "agent token created",
            extra={"token_id": created.info.token_id, "agent": ask.agent, "tenant": ask.tenant},
        )
        return created

    async def list_tokens(query: ListTokens, _context: RequestContext) -> TokenList:
        return TokenList(tokens=tuple(await store.every(query.tenant)))

    async def revoke(ask: RevokeToken, _context: RequestContext) -> TokenRevoked:
        token_hash, info = await store.revoke(ask.token_id)
        await revoked(token_hash)
        logger.info("agent token revoked", extra={"token_id": info.token_id, "agent": info.agent})
        return TokenRevoked(token_id=info.token_id, agent=info.agent, tenant=info.tenant)

    service.add_endpoint("token_create", subjects.FRONTDOOR_TOKEN_CREATE, CreateToken, create)
    service.add_endpoint("token_list", subjects.FRONTDOOR_TOKEN_LIST, ListTokens, list_tokens)
    service.add_endpoint("token_revoke", subjects.FRONTDOOR_TOKEN_REVOKE, RevokeToken, revoke)
