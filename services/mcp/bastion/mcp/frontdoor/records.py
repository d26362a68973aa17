"""Session-based MCP sessions in JetStream KV, so that every front door replica serves them."""

from __future__ import annotations

from collections.abc import Callable

import nats.errors

from bastion.proto import subjects
from bastion.proto.frontdoor import McpSessionRecord
from bastion.shared.bus import Client
from bastion.shared.errors import Unavailable
from bastion.shared.kv import AlreadyStored, TypedBucket

__all__ = ["SessionRecords", "stateless_key"]

_HEX = frozenset("0123456789abcdef")
_STATELESS = "token."


def stateless_key(token_hash: str) -> str:
    """The record of a token's one Bastion session for stateless (2026-07-28) requests."""
    return _STATELESS + token_hash


def _key(key: str) -> str | None:
    """The KV key of a session id, or None when the id could not be one of ours (the SDK
    mints `uuid4().hex`): what a client sends is never used as a key unchecked."""
    bare = key.removeprefix(_STATELESS)
    if len(bare) == (64 if key.startswith(_STATELESS) else 32) and set(bare) <= _HEX:
        return key
    return None


class SessionRecords:
    """Read, create, change (compare-and-set) and forget MCP session records."""

    def __init__(self, bucket: TypedBucket[McpSessionRecord]) -> None:
        self._bucket = bucket

    @classmethod
    async def open(cls, client: Client, ttl_s: float | None = None) -> SessionRecords:
        """The records, kept at most `ttl_s` after their last change (the bucket's TTL)."""
        bucket = subjects.FRONTDOOR_SESSIONS_BUCKET
        return cls(await TypedBucket.open(client, bucket, McpSessionRecord, ttl_s=ttl_s))

    async def of_token(self, token_hash: str) -> list[McpSessionRecord]:
        """Every record of the token `token_hash`."""
        return [record for record in await self.every() if record.token_hash == token_hash]

    async def every(self) -> list[McpSessionRecord]:
        """Every record, of every token."""
        try:
            return [
                entry.value async for entry in self._bucket.iterate() if _key(entry.key) is not None
            ]
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the MCP sessions could not be read from NATS: retry") from None

    async def put(self, record: McpSessionRecord) -> None:
        key = _key(record.mcp_session_id)
        assert key is not None, "the session ids this front door mints are uuid4 hex"
        await self._bucket.put(key, record)

    async def create(self, record: McpSessionRecord) -> bool:
        """Keep `record` unless one is kept under its key already; False then."""
        key = _key(record.mcp_session_id)
        assert key is not None, "the keys this front door makes are well formed"
        try:
            await self._bucket.create(key, record)
        except AlreadyStored:
            return False
        return True

    async def get(self, mcp_session_id: str) -> McpSessionRecord | None:
        key = _key(mcp_session_id)
        if key is None:
            return None
        try:
            found = await self._bucket.find(key)
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the MCP sessions could not be read from NATS: retry") from None
        return None if found is None else found.value

    async def update(
        self,
        mcp_session_id: str,
        change: Callable[[McpSessionRecord], McpSessionRecord],
        attempts: int = 5,
    ) -> McpSessionRecord | None:
        """Apply `change` with compare-and-set, retrying on a race; None if it is gone."""
        key = _key(mcp_session_id)
        if key is None:
            return None
        try:
            return await self._bucket.update(
                key,
                lambda record: None if record is None else change(record),
                attempts=attempts,
                conflict=f"MCP session {mcp_session_id} kept changing under this update; retry",
            )
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the MCP sessions could not be read from NATS: retry") from None

    async def forget(self, mcp_session_id: str) -> None:
        key = _key(mcp_session_id)
        if key is not None:
            await self._bucket.delete(key)
