"""Session-based MCP sessions in JetStream KV, so that every front door replica serves them."""

from __future__ import annotations

from collections.abc import Callable

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from bastion.proto import subjects
from bastion.proto.errors import CONFLICT
from bastion.proto.frontdoor import McpSessionRecord
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.errors import RemoteError, Unavailable
from bastion.shared.kv import bucket_keys, open_bucket

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

    def __init__(self, client: Client, kv: KeyValue) -> None:
        self._client = client
        self._kv = kv

    @classmethod
    async def open(cls, client: Client, ttl_s: float | None = None) -> SessionRecords:
        """The records, kept at most `ttl_s` after their last change (the bucket's TTL)."""
        kv = await open_bucket(client, subjects.FRONTDOOR_SESSIONS_BUCKET, ttl_s=ttl_s)
        return cls(client, kv)

    async def of_token(self, token_hash: str) -> list[McpSessionRecord]:
        """Every record of the token `token_hash`."""
        found = []
        for key in await bucket_keys(self._client, self._kv):
            record = await self.get(key)
            if record is not None and record.token_hash == token_hash:
                found.append(record)
        return found

    async def put(self, record: McpSessionRecord) -> None:
        key = _key(record.mcp_session_id)
        assert key is not None, "the session ids this front door mints are uuid4 hex"
        await self._kv.put(key, encode(record))

    async def create(self, record: McpSessionRecord) -> bool:
        """Keep `record` unless one is kept under its key already; False then."""
        key = _key(record.mcp_session_id)
        assert key is not None, "the keys this front door makes are well formed"
        try:
            await self._kv.create(key, encode(record))
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def get(self, mcp_session_id: str) -> McpSessionRecord | None:
        found = await self._get(mcp_session_id)
        return found[0] if found is not None else None

    async def _get(self, mcp_session_id: str) -> tuple[McpSessionRecord, int] | None:
        key = _key(mcp_session_id)
        if key is None:
            return None
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the MCP sessions could not be read from NATS: retry") from None
        if entry.value is None or entry.revision is None:
            return None
        record: McpSessionRecord = decode(entry.value, McpSessionRecord)
        return record, entry.revision

    async def update(
        self,
        mcp_session_id: str,
        change: Callable[[McpSessionRecord], McpSessionRecord],
        attempts: int = 5,
    ) -> McpSessionRecord | None:
        """Apply `change` with compare-and-set, retrying on a race; None if it is gone."""
        for _ in range(attempts):
            found = await self._get(mcp_session_id)
            if found is None:
                return None
            record, revision = found
            changed = change(record)
            try:
                await self._kv.update(mcp_session_id, encode(changed), last=revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
            return changed
        raise RemoteError(
            CONFLICT, f"MCP session {mcp_session_id} kept changing under this update; retry"
        )

    async def forget(self, mcp_session_id: str) -> None:
        key = _key(mcp_session_id)
        if key is not None:
            await self._kv.delete(key)
