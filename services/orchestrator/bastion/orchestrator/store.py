"""Sessions kept in a JetStream KV bucket, changed only by compare-and-set."""

from __future__ import annotations

from collections.abc import Callable

from bastion.proto.session import SessionInfo
from bastion.shared.bus import Client
from bastion.shared.kv import ChangedSince, KeptChanging, NotStored, TypedBucket

__all__ = ["SessionStore"]

_ATTEMPTS = 20
"""How often an update of a session is tried: a session's reads side by side (up to
`BASTION_SESSION_PARALLEL_READS`) each count themselves in it, and may taint it, at once."""


def _missing(session_id: str) -> NotStored:
    return NotStored(
        f"there is no session {session_id}: check the id (`bastion agent run` prints "
        "it as `session <id> for agent …`, `bastion audit tail` shows the sessions "
        "recorded lately), or open a new session with `bastion agent run`"
    )


class SessionStore:
    """Read, create and update sessions; the store, not a process's memory, is the truth."""

    def __init__(self, bucket: TypedBucket[SessionInfo]) -> None:
        self._bucket = bucket

    @property
    def bucket(self) -> TypedBucket[SessionInfo]:
        """The bucket itself, for records kept beside the sessions (`opencaps`)."""
        return self._bucket

    @classmethod
    async def open(cls, client: Client, bucket: str) -> SessionStore:
        """The store on `bucket`, created (file storage, one revision kept) if missing."""
        return cls(await TypedBucket.open(client, bucket, SessionInfo))

    async def create(self, session: SessionInfo) -> None:
        await self._bucket.create(session.session_id, session)

    async def get(self, session_id: str) -> tuple[SessionInfo, int]:
        """The session and its revision.

        Raises:
            NotFound: no session has that id.
        """
        found = await self._bucket.find(session_id)
        if found is None:
            raise _missing(session_id)
        return found.value, found.revision

    async def update(
        self,
        session_id: str,
        change: Callable[[SessionInfo], SessionInfo],
        attempts: int = _ATTEMPTS,
        *,
        known: tuple[SessionInfo, int] | None = None,
    ) -> SessionInfo:
        """Apply `change` to the stored session with compare-and-set, retrying at once on a
        race (its racers are the session's few calls in at once: each round one of them
        wins, so none waits a pause out). `known`, the session and its revision as the
        caller read it, is tried first without reading it again.

        Raises:
            NotFound: no session has that id.
            KeptChanging: other writers kept changing it.
        """
        for _ in range(attempts):
            session, revision = known or await self.get(session_id)
            known = None
            changed = change(session)
            try:
                await self._bucket.replace(session_id, changed, revision)
            except ChangedSince:
                continue
            return changed
        raise KeptChanging(f"session {session_id} kept changing under this update; retry")
