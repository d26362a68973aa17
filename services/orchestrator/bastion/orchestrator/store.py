"""Sessions kept in a JetStream KV bucket, changed only by compare-and-set."""

from __future__ import annotations

from collections.abc import Callable

import nats.js.errors
from nats.js.kv import KeyValue

from bastion.proto.errors import CONFLICT
from bastion.proto.session import SessionInfo
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.errors import NotFound, RemoteError
from bastion.shared.kv import open_bucket

__all__ = ["SessionStore"]


class SessionStore:
    """Read, create and update sessions; the store, not a process's memory, is the truth."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    @property
    def kv(self) -> KeyValue:
        """The bucket itself, for records kept beside the sessions (`opencaps`)."""
        return self._kv

    @classmethod
    async def open(cls, client: Client, bucket: str) -> SessionStore:
        """The store on `bucket`, created (file storage, one revision kept) if missing."""
        kv = await open_bucket(client, bucket)
        return cls(kv)

    async def create(self, session: SessionInfo) -> None:
        await self._kv.create(session.session_id, encode(session))

    async def get(self, session_id: str) -> tuple[SessionInfo, int]:
        """The session and its revision.

        Raises:
            NotFound: no session has that id.
        """
        try:
            entry = await self._kv.get(session_id)
        except nats.js.errors.KeyNotFoundError:
            raise NotFound(
                f"there is no session {session_id}: check the id (`bastion agent run` prints "
                "it as `session <id> for agent …`, `bastion audit tail` shows the sessions "
                "recorded lately), or open a new session with `bastion agent run`"
            ) from None
        assert entry.value is not None and entry.revision is not None
        return decode(entry.value, SessionInfo), entry.revision

    async def update(
        self, session_id: str, change: Callable[[SessionInfo], SessionInfo], attempts: int = 5
    ) -> SessionInfo:
        """Apply `change` to the stored session with compare-and-set, retrying on a race."""
        for _ in range(attempts):
            session, revision = await self.get(session_id)
            changed = change(session)
            try:
                await self._kv.update(session_id, encode(changed), last=revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
            return changed
        raise RemoteError(CONFLICT, f"session {session_id} kept changing under this update; retry")
