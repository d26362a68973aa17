"""The bus endpoints `bastion token create|list|revoke` talk to."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bastion.mcp.frontdoor.tokens import TokenStore
from bastion.proto import subjects
from bastion.proto.frontdoor import (
    CreateToken,
    ListTokens,
    RevokeToken,
    TokenCreated,
    TokenList,
    TokenRevoked,
)
from bastion.shared.service import RequestContext, Service

__all__ = ["add_token_endpoints"]

logger = logging.getLogger(__name__)


def add_token_endpoints(
    service: Service, store: TokenStore, revoked: Callable[[str], Awaitable[None]]
) -> None:
    """Serve the token operations on `service`; `revoked(token_hash)` is awaited after a
    token is revoked (it closes the token's stateless session)."""

    async def create(ask: CreateToken, _context: RequestContext) -> TokenCreated:
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
