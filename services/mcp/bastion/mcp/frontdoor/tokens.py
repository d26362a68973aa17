"""Agents' bearer tokens: minted here, shown once, kept only as a SHA-256 in JetStream KV."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
import nats.errors

from bastion.proto import subjects
from bastion.proto.frontdoor import CreateToken, TokenCreated, TokenInfo
from bastion.proto.session import OpenSession
from bastion.shared.bus import Client
from bastion.shared.errors import NotFound, Unavailable
from bastion.shared.kv import TypedBucket

__all__ = ["TOKEN_PREFIX", "TokenStore", "hash_of", "opening_of"]

TOKEN_PREFIX: Final = "bst_"
"""Every agent token starts so, which makes a leaked one easy to recognise (and scan for)."""


def hash_of(token: str) -> str:
    """The token's SHA-256, hex: its key in the bucket. A token is 32 random bytes, so a
    plain hash is enough (there is nothing to guess that a slow hash would protect)."""
    return hashlib.sha256(token.encode()).hexdigest()


_OPENING: Final = frozenset(f.name for f in msgspec.structs.fields(OpenSession))
_PROFILE: Final = frozenset(f.name for f in msgspec.structs.fields(CreateToken))


def opening_of(profile: CreateToken | TokenInfo, **more: Any) -> OpenSession:
    """The `OpenSession` of a session with `profile` (what the token was created with),
    with `more` (`token_id`, `elicits`) beside it."""
    given = {name: getattr(profile, name) for name in _OPENING & _PROFILE}
    return OpenSession(**given, **more)


def _id_of(digest: str) -> str:
    # The id is a piece of the hash: it names the token and says nothing of it.
    return digest[:16]


class TokenStore:
    """Create, find, list and revoke tokens; the bucket, not a process's memory, is the truth,
    so a token revoked through one replica is refused by every other at its next request."""

    def __init__(self, bucket: TypedBucket[TokenInfo]) -> None:
        self._bucket = bucket

    @classmethod
    async def open(cls, client: Client) -> TokenStore:
        return cls(await TypedBucket.open(client, subjects.FRONTDOOR_TOKENS_BUCKET, TokenInfo))

    async def create(self, ask: CreateToken) -> TokenCreated:
        """A new token for `ask`'s agent; the token itself is in the answer and nowhere else."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        digest = hash_of(token)
        info = TokenInfo(
            token_id=_id_of(digest),
            created_at=datetime.now(UTC),
            **{name: getattr(ask, name) for name in _PROFILE},
        )
        await self._bucket.create(digest, info)
        return TokenCreated(token=token, info=info)

    async def find(self, token: str) -> tuple[str, TokenInfo] | None:
        """The hash and profile of `token`, or None when it is unknown or revoked."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 128:
            return None
        digest = hash_of(token)
        try:
            found = await self._bucket.find(digest)
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the agent tokens could not be read from NATS: retry") from None
        return None if found is None else (digest, found.value)

    async def live(self, token_hash: str) -> bool:
        """Whether the token whose hash is `token_hash` is still live (not revoked)."""
        try:
            return await self._bucket.find(token_hash) is not None
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the agent tokens could not be read from NATS: retry") from None

    async def every(self, tenant: str | None = None) -> list[TokenInfo]:
        """Every live token (of `tenant`, when given), oldest first."""
        found = [
            entry.value
            async for entry in self._bucket.iterate()
            if tenant is None or entry.value.tenant == tenant
        ]
        return sorted(found, key=lambda i: i.created_at)

    async def revoke(self, token_id: str) -> tuple[str, TokenInfo]:
        """Forget the token `token_id`; its hash and what it was.

        Raises:
            NotFound: no live token has that id.
        """
        for key in await self._bucket.keys():
            if _id_of(key) != token_id:
                continue
            found = await self._bucket.find(key)
            if found is None:
                continue
            await self._bucket.delete(key)
            return key, found.value
        raise NotFound(f"there is no token {token_id}: `bastion token list` shows the live ones")
