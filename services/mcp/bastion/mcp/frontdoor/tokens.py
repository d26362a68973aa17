"""Agents' bearer tokens: minted here, shown once, kept only as a SHA-256 in JetStream KV."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import Final

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from bastion.proto import subjects
from bastion.proto.frontdoor import CreateToken, TokenCreated, TokenInfo
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.errors import NotFound, Unavailable
from bastion.shared.kv import bucket_keys, open_bucket

__all__ = ["TOKEN_PREFIX", "TokenStore", "hash_of"]

TOKEN_PREFIX: Final = "bst_"
"""Every agent token starts so, which makes a leaked one easy to recognise (and scan for)."""


def hash_of(token: str) -> str:
    """The token's SHA-256, hex: its key in the bucket. A token is 32 random bytes, so a
    plain hash is enough (there is nothing to guess that a slow hash would protect)."""
    return hashlib.sha256(token.encode()).hexdigest()


def _id_of(digest: str) -> str:
    # The id is a piece of the hash: it names the token and says nothing of it.
    return digest[:16]


class TokenStore:
    """Create, find, list and revoke tokens; the bucket, not a process's memory, is the truth,
    so a token revoked through one replica is refused by every other at its next request."""

    def __init__(self, client: Client, kv: KeyValue) -> None:
        self._client = client
        self._kv = kv

    @classmethod
    async def open(cls, client: Client) -> TokenStore:
        return cls(client, await open_bucket(client, subjects.FRONTDOOR_TOKENS_BUCKET))

    async def create(self, ask: CreateToken) -> TokenCreated:
        """A new token for `ask`'s agent; the token itself is in the answer and nowhere else."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        digest = hash_of(token)
        info = TokenInfo(
            token_id=_id_of(digest),
            agent=ask.agent,
            tenant=ask.tenant,
            autonomy=ask.autonomy,
            workspace=ask.workspace,
            shell=ask.shell,
            web=ask.web,
            mcp=ask.mcp,
            created_at=datetime.now(UTC),
        )
        await self._kv.create(digest, encode(info))
        return TokenCreated(token=token, info=info)

    async def find(self, token: str) -> tuple[str, TokenInfo] | None:
        """The hash and profile of `token`, or None when it is unknown or revoked."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 128:
            return None
        digest = hash_of(token)
        try:
            entry = await self._kv.get(digest)
        except nats.js.errors.KeyNotFoundError:
            return None
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the agent tokens could not be read from NATS: retry") from None
        if entry.value is None:
            return None
        info: TokenInfo = decode(entry.value, TokenInfo)
        return digest, info

    async def every(self, tenant: str | None = None) -> list[TokenInfo]:
        """Every live token (of `tenant`, when given), oldest first."""
        found = []
        for key in await bucket_keys(self._client, self._kv):
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue
            if entry.value is None:
                continue
            info: TokenInfo = decode(entry.value, TokenInfo)
            if tenant is None or info.tenant == tenant:
                found.append(info)
        return sorted(found, key=lambda i: i.created_at)

    async def revoke(self, token_id: str) -> tuple[str, TokenInfo]:
        """Forget the token `token_id`; its hash and what it was.

        Raises:
            NotFound: no live token has that id.
        """
        for key in await bucket_keys(self._client, self._kv):
            if _id_of(key) != token_id:
                continue
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue
            assert entry.value is not None
            info: TokenInfo = decode(entry.value, TokenInfo)
            await self._kv.delete(key)
            return key, info
        raise NotFound(f"there is no token {token_id}: `bastion token list` shows the live ones")
