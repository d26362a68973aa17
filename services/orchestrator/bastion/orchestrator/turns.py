"""Session turns across orchestrator replicas: one holder of a session's calls at a time.

A session's turn is a record in the KV bucket `bastion_turns` (key: the session id) naming
the orchestrator instance that runs its calls now and until when. It is taken by
compare-and-set (create when absent, update at the revision read when expired), kept
alive while held (renewed every third of its lifetime), and deleted at that revision when
the call ends. An orchestrator that dies (kill -9) leaves its record behind: once it
expires, the next instance asked about the session takes it over, and is told so, so it
can settle what the dead holder left (an approved call found `running`). Within one
instance an `anyio.Lock` per session queues its calls first, so the store sees one
contender per instance.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import msgspec
import nats.errors

from bastion.proto import errors as codes
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError
from bastion.shared.kv import AlreadyStored, ChangedSince, TypedBucket
from bastion.shared.renewing import renewing

__all__ = ["TurnRecord", "TurnTimeout", "Turns"]

logger = logging.getLogger(__name__)

_POLL_S = (0.01, 0.02, 0.05, 0.1, 0.2)
"""How long to wait between looks at a turn someone else holds: soon first, then less often."""
_BUCKET_TTL_S = 3600.0
"""Deleted turns leave markers; the bucket forgets them (and any turn not renewed) after this."""


class TurnRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a session's turn, and until when (seconds since the epoch)."""

    holder: str
    expires_at: float


class _Held:
    """A turn this instance holds: its revision now, and whether a renewal found it lost."""

    def __init__(self, revision: int) -> None:
        self.revision = revision
        self.lost = False


class TurnTimeout(BastionError):
    """Another orchestrator kept the session's turn for longer than a call may wait."""

    code = codes.UNAVAILABLE


class Turns:
    """Take, keep and give back session turns in the `bastion_turns` bucket."""

    def __init__(self, bucket: TypedBucket[TurnRecord], ttl_s: float, wait_s: float) -> None:
        self._bucket = bucket
        self._ttl_s = ttl_s
        self._wait_s = wait_s
        self.holder = f"{socket.gethostname()}:{secrets.token_hex(4)}"

    @classmethod
    async def open(cls, client: Client, bucket: str, ttl_s: float, wait_s: float) -> Turns:
        """Turns in `bucket` (created if missing) that expire `ttl_s` after their last
        renewal; a call waits at most `wait_s` for a turn."""
        turns = await TypedBucket.open(
            client, bucket, TurnRecord, ttl_s=max(_BUCKET_TTL_S, 3 * ttl_s)
        )
        return cls(turns, ttl_s, wait_s)

    def _record(self) -> TurnRecord:
        return TurnRecord(holder=self.holder, expires_at=time.time() + self._ttl_s)

    async def _try_take(self, session_id: str) -> tuple[int, bool] | None:
        """The revision of the turn if this instance took it now (and whether it took it over
        from a holder that let it expire), or None while someone else holds it."""
        try:
            return await self._bucket.create(session_id, self._record()), False
        except AlreadyStored:
            pass
        entry = await self._bucket.find(session_id)
        if entry is None:
            return None  # given back between the two looks: try again
        held = entry.value
        if held.expires_at > time.time():
            return None
        try:
            revision = await self._bucket.replace(session_id, self._record(), entry.revision)
        except ChangedSince:
            return None  # another instance took it over first
        logger.warning(
            "took over a session's turn its holder let expire",
            extra={"session": session_id, "holder": held.holder},
        )
        return revision, True

    async def _take(self, session_id: str, wait_s: float) -> tuple[int, bool]:
        deadline = time.monotonic() + wait_s
        for attempt in itertools.count():
            taken = await self._try_take(session_id)
            if taken is not None:
                return taken
            if time.monotonic() > deadline:
                break
            await anyio.sleep(_POLL_S[min(attempt, len(_POLL_S) - 1)])
        raise TurnTimeout(
            f"another orchestrator kept session {session_id}'s turn for over {wait_s:g} s: "
            "retry the call with the same call_id"
        )

    async def _renew(self, session_id: str, held: _Held) -> None:
        """Keep the turn alive while held; a lost renewal is logged (a stalled process that
        let it expire may now share the session with its new holder)."""
        while True:
            await anyio.sleep(self._ttl_s / 3)
            try:
                held.revision = await self._bucket.replace(
                    session_id, self._record(), held.revision
                )
            except ChangedSince:
                held.lost = True
                logger.error(
                    "lost a session's turn while holding it", extra={"session": session_id}
                )
                return
            except nats.errors.Error as error:  # the bus hiccuped: try again at the next beat
                logger.warning(
                    "a session's turn was not renewed",
                    extra={"session": session_id, "error_type": type(error).__name__},
                )

    @asynccontextmanager
    async def hold(self, session_id: str, *, wait_s: float | None = None) -> AsyncIterator[bool]:
        """Hold the session's turn for the block; yields True when it was taken over from a
        holder that died (its leftovers are the new holder's to settle).

        Raises:
            TurnTimeout: another instance held it for longer than `wait_s` (by default, as
                long as a call may wait; 0: it was held at the first look).
        """
        revision, taken_over = await self._take(
            session_id, self._wait_s if wait_s is None else wait_s
        )
        held = _Held(revision)
        try:
            async with renewing(partial(self._renew, session_id, held)):
                yield taken_over
        finally:
            if not held.lost:
                with anyio.CancelScope(shield=True):
                    await self._give_back(session_id, held.revision)

    async def _give_back(self, session_id: str, revision: int) -> None:
        try:
            await self._bucket.delete(session_id, revision=revision)
        except ChangedSince:
            # taken over while this instance was stalled: no longer ours to give back
            logger.warning(
                "a session's turn changed before it was given back", extra={"session": session_id}
            )
        except nats.errors.Error as error:  # it expires on its own
            logger.warning(
                "a session's turn was not given back",
                extra={"session": session_id, "error_type": type(error).__name__},
            )
