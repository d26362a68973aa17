"""Sessions kept in a JetStream KV bucket, changed only by compare-and-set; each as this
instance last read or wrote it is kept in memory too, for a turn taken with the session
unchanged since (`Turns.took_unchanged`)."""

from __future__ import annotations

from collections.abc import Callable

from bastion.proto.session import SessionInfo
from bastion.shared.bus import Client
from bastion.shared.kv import ChangedSince, KeptChanging, NotStored, Replacing, TypedBucket

__all__ = ["SessionStore"]

_KEPT = 4096
"""How many sessions this instance keeps as it last read or wrote them (the oldest forgotten)."""
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
    """Read, create and update sessions; the store is the truth, and what this instance keeps
    of a session is used only where nobody else can have changed it since (§2.1)."""

    def __init__(self, bucket: TypedBucket[SessionInfo]) -> None:
        self._bucket = bucket
        self._kept: dict[str, tuple[SessionInfo, int]] = {}
        self._forgotten: dict[str, int] = {}
        """How often each session was forgotten (lately): a read sent before the last time
        may bring what others changed since, so it is not kept."""

    def keep(self, session: SessionInfo, revision: int) -> None:
        """Keep `session` at `revision` unless a later revision of it is kept."""
        kept = self._kept.get(session.session_id)
        if kept is not None and kept[1] >= revision:
            return
        if kept is None and len(self._kept) >= _KEPT:
            del self._kept[next(iter(self._kept))]
        self._kept[session.session_id] = (session, revision)

    def kept(self, session_id: str) -> tuple[SessionInfo, int] | None:
        """The session and its revision as this instance last read or wrote it, if kept."""
        return self._kept.get(session_id)

    def forget(self, session_id: str) -> None:
        """Keep the session no longer: others may have changed it since."""
        self._kept.pop(session_id, None)
        if session_id not in self._forgotten and len(self._forgotten) >= _KEPT:
            del self._forgotten[next(iter(self._forgotten))]
        self._forgotten[session_id] = self._forgotten.get(session_id, 0) + 1

    @property
    def bucket(self) -> TypedBucket[SessionInfo]:
        """The bucket itself, for records kept beside the sessions (`opencaps`)."""
        return self._bucket

    @classmethod
    async def open(cls, client: Client, bucket: str) -> SessionStore:
        """The store on `bucket`, created (file storage, one revision kept) if missing."""
        return cls(await TypedBucket.open(client, bucket, SessionInfo))

    async def create(self, session: SessionInfo) -> None:
        self.keep(session, await self._bucket.create(session.session_id, session))

    async def get(self, session_id: str) -> tuple[SessionInfo, int]:
        """The session and its revision.

        Raises:
            NotFound: no session has that id.
        """
        forgotten = self._forgotten.get(session_id)
        found = await self._bucket.find(session_id)
        if found is None:
            raise _missing(session_id)
        if self._forgotten.get(session_id) == forgotten:
            self.keep(found.value, found.revision)
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
                self.keep(changed, await self._bucket.replace(session_id, changed, revision))
            except ChangedSince:
                continue
            return changed
        raise KeptChanging(f"session {session_id} kept changing under this update; retry")

    async def send_update(
        self,
        session_id: str,
        change: Callable[[SessionInfo], SessionInfo],
        known: tuple[SessionInfo, int],
    ) -> Updating:
        """`update` starting from `known`, its first compare-and-set sent now (so what is
        sent after it reaches NATS after it) and the rest done by `Updating.done`."""
        session, revision = known
        changed = change(session)
        sent = await self._bucket.send_replace(session_id, changed, revision)
        return Updating(self, session_id, change, changed, sent)


class Updating:
    """An update of a session whose first compare-and-set is sent, its answer to come."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        change: Callable[[SessionInfo], SessionInfo],
        changed: SessionInfo,
        sent: Replacing,
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._change = change
        self._changed = changed
        self._sent = sent

    async def done(self) -> SessionInfo:
        """The session as changed: the write sent, or, when another write came first, the
        update read and tried again (`SessionStore.update`).

        Raises:
            NotFound: no session has that id.
            KeptChanging: other writers kept changing it.
        """
        try:
            self._store.keep(self._changed, await self._sent.revision())
        except ChangedSince:
            return await self._store.update(self._session_id, self._change)
        return self._changed
