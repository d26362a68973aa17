"""Session turns across orchestrator replicas: one holder alone, or a session's reads side
by side.

A session's turn is a record in the KV bucket `bastion_turns` (key: the session id). Held
alone, it names the orchestrator instance that runs the session's call now and until when;
shared, it lists the instances whose reads are in it (one share each, taken by the first of
its reads in and given back by the last out) and until when each share is kept. It is taken
by compare-and-set (created when absent, changed at the revision read), kept alive while
held (renewed every third of its lifetime), and given back at its revision when the call
ends (the record emptied with its last holder: an empty record is a free turn). An instance
remembers the record it wrote last of each session, and its revision, and takes the turn
next by a write at that revision, without reading the record first (a write another
instance overtook fails, and the record is read then): taking and giving back a turn is
two writes. An instance that wants it alone and finds
reads in it marks the record as waited for: no other instance lets a read in until it had
its turn, and its own share takes no further read once it sees the mark (at its next
renewal). An orchestrator that dies (kill -9) leaves its record behind: once it expires,
the next instance asked about the session takes it over, and is told so, so it can settle
what the dead holder left (an approved call found `running`). Within one instance the
session's `CallOrder` queues its calls first (docs/architecture.md §9).
"""

from __future__ import annotations

import contextlib
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
from bastion.shared.kv import AlreadyStored, ChangedSince, Entry, TypedBucket
from bastion.shared.renewing import renewing

__all__ = ["TurnRecord", "TurnTimeout", "Turns"]

logger = logging.getLogger(__name__)

_POLL_S = (0.01, 0.02, 0.05, 0.1, 0.2)
"""How long to wait between looks at a turn someone else holds: soon first, then less often."""
_BUCKET_TTL_S = 3600.0
"""The bucket forgets a free turn (and any turn not renewed) after this."""
_REMEMBERED = 4096
"""How many sessions' last written turn record an instance remembers (the oldest forgotten)."""


class TurnRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a session's turn, and until when (seconds since the epoch): one holder
    alone, or the reads sharing it (token: until when), and which instance waits to hold
    it alone (until when it is waited for)."""

    holder: str = ""
    expires_at: float = 0.0
    readers: dict[str, float] = msgspec.field(default_factory=dict)
    waiting: str = ""
    waiting_until: float = 0.0

    def held_alone(self, now: float) -> bool:
        """Whether one holder has the turn and has not let it expire."""
        return bool(self.holder) and self.expires_at > now

    def live_readers(self, now: float) -> dict[str, float]:
        """The reads sharing the turn that have not let it expire."""
        return {token: until for token, until in self.readers.items() if until > now}

    def waited_for_by_other(self, holder: str, now: float) -> bool:
        """Whether an instance other than `holder` waits to hold the turn alone."""
        return bool(self.waiting) and self.waiting != holder and self.waiting_until > now


class _Share:
    """This instance's share of a session's turn, one entry in the record for all its reads
    of the session in at once: how many are, the entry's token, whether it was lost, and
    whether an instance waits to hold the turn alone (then no further read joins it)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.count = 0
        self.taking = anyio.Lock(fast_acquire=True)  # free: taken without a loop turn
        self.held = False
        self.lost = False
        self.closing = False
        self.renewed_at = 0.0
        self.gone = anyio.Event()


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
        self._shares: dict[str, _Share] = {}
        self.holder = f"{socket.gethostname()}:{secrets.token_hex(4)}"
        self._reads = itertools.count()
        self._written: dict[str, Entry[TurnRecord]] = {}
        """The record this instance wrote last of each session, at its revision."""

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

    async def _write(self, session_id: str, record: TurnRecord, revision: int) -> int:
        """`record` written at `revision` (compare-and-set), and remembered; its revision.

        Raises:
            ChangedSince: the record is at another revision now.
        """
        self._written.pop(session_id, None)
        written = await self._bucket.replace(session_id, record, revision)
        if len(self._written) >= _REMEMBERED:
            del self._written[next(iter(self._written))]
        self._written[session_id] = Entry(session_id, record, written)
        return written

    async def _write_if_free(self, session_id: str, record: TurnRecord) -> int | None:
        """`record` written over the free turn this instance left, if nobody wrote since;
        its revision, or None (then the record is read, as at a first take)."""
        last = self._written.get(session_id)
        if last is None or last.value != TurnRecord():
            return None
        try:
            return await self._write(session_id, record, last.revision)
        except ChangedSince:
            return None

    async def _try_take(self, session_id: str) -> tuple[int, bool] | None:
        """The revision of the turn if this instance took it alone now (and whether it took
        it over from holders that let it expire), or None while others hold it."""
        written = await self._write_if_free(session_id, self._record())
        if written is not None:
            return written, False
        try:
            return await self._bucket.create(session_id, self._record()), False
        except AlreadyStored:
            pass
        entry = await self._bucket.find(session_id)
        if entry is None:
            return None  # given back between the two looks: try again
        held, now = entry.value, time.time()
        if held.held_alone(now):
            return None
        if held.live_readers(now):
            await self._wait_for(session_id, held, entry.revision, now)
            return None
        try:
            revision = await self._write(session_id, self._record(), entry.revision)
        except ChangedSince:
            return None  # another instance took it over first
        if not held.holder and not held.readers:
            return revision, False  # only marked as waited for: nobody let it expire
        logger.warning(
            "took over a session's turn its holder let expire",
            extra={"session": session_id, "holder": held.holder or ",".join(held.readers)},
        )
        return revision, True

    async def _wait_for(self, session_id: str, held: TurnRecord, revision: int, now: float) -> None:
        """Mark the shared turn as waited for by this instance (unless another instance
        waits first), so no instance lets further reads in before this one holds it."""
        if held.waited_for_by_other(self.holder, now):
            return
        if held.waiting == self.holder and held.waiting_until - now > self._ttl_s / 2:
            return
        marked = msgspec.structs.replace(held, waiting=self.holder, waiting_until=now + self._ttl_s)
        with contextlib.suppress(ChangedSince):  # the readers changed: marked at the next look
            await self._write(session_id, marked, revision)

    async def _try_share(self, session_id: str, token: str) -> tuple[int, bool] | None:
        """The revision of the turn once the read `token` shares it (and whether it took it
        over from a holder that let it expire), or None while it is held alone or waited
        for by another instance.

        Raises:
            ChangedSince: another read changed the record between the look and the change.
        """
        now = time.time()
        mine = {token: now + self._ttl_s}
        written = await self._write_if_free(session_id, TurnRecord(readers=mine))
        if written is not None:
            return written, False
        try:
            return await self._bucket.create(session_id, TurnRecord(readers=mine)), False
        except AlreadyStored:
            pass
        entry = await self._bucket.find(session_id)
        if entry is None:
            raise ChangedSince(f"session {session_id}'s turn was given back meanwhile")
        held = entry.value
        if held.held_alone(now) or held.waited_for_by_other(self.holder, now):
            return None
        readers = {} if held.holder else held.live_readers(now)
        shared = msgspec.structs.replace(held, holder="", expires_at=0.0, readers=readers | mine)
        revision = await self._write(session_id, shared, entry.revision)
        if held.holder:
            logger.warning(
                "took over a session's turn its holder let expire",
                extra={"session": session_id, "holder": held.holder},
            )
        return revision, bool(held.holder)

    async def _take(self, session_id: str, wait_s: float, token: str | None) -> tuple[int, bool]:
        deadline = time.monotonic() + wait_s
        attempt = 0
        while True:
            raced = False
            try:
                taken = await (
                    self._try_take(session_id)
                    if token is None
                    else self._try_share(session_id, token)
                )
            except ChangedSince:  # another read of the session came in first: look again now
                taken, raced = None, True
            if taken is not None:
                return taken
            if time.monotonic() > deadline:
                break
            if not raced:
                await anyio.sleep(_POLL_S[min(attempt, len(_POLL_S) - 1)])
                attempt += 1
        raise TurnTimeout(
            f"another orchestrator kept session {session_id}'s turn for over {wait_s:g} s: "
            "retry the call with the same call_id"
        )

    async def _renew(self, session_id: str, held: _Held) -> None:
        """Keep the turn alive while held alone, from a third of its lifetime on (`hold`
        starts it then): renewed, then again every third; a lost renewal is logged (a
        stalled process that let it expire may now share the session with its new holder)."""
        while True:
            try:
                held.revision = await self._write(session_id, self._record(), held.revision)
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
            await anyio.sleep(self._ttl_s / 3)

    async def _renew_share(self, session_id: str, share: _Share) -> None:
        """Keep this instance's share of the turn alive while a read of it runs, from a third
        of its lifetime on (`_shared` starts it then), every third (each read runs this; the
        first to find the share due renews it); a lost share is logged, as a lost turn is,
        and a share found waited for takes no further read."""
        while True:
            if time.monotonic() - share.renewed_at >= self._ttl_s / 4:
                share.renewed_at = time.monotonic()
                try:
                    found = await self._change_share(session_id, share.token, keep=True)
                except nats.errors.Error as error:
                    logger.warning(
                        "a session's shared turn was not renewed",
                        extra={"session": session_id, "error_type": type(error).__name__},
                    )
                else:
                    if found is None:
                        share.lost = True
                        logger.error(
                            "lost a session's shared turn while holding it",
                            extra={"session": session_id},
                        )
                        return
                    if found.waited_for_by_other(self.holder, time.time()):
                        share.closing = True
            # else another read of the share renewed it lately
            await anyio.sleep(self._ttl_s / 3)

    async def _change_share(self, session_id: str, token: str, *, keep: bool) -> TurnRecord | None:
        """Renew the share `token` of the turn (`keep`) or give it back (emptying the
        record with the last share, unless an instance waits to hold it alone); the record
        as it was found, or None if the share was no longer in it. The record this instance
        wrote last is tried first, unread."""
        entry = self._written.get(session_id)
        if entry is not None and token not in entry.value.readers:
            entry = None
        while True:
            if entry is None:
                entry = await self._bucket.find(session_id)
            if entry is None or entry.value.holder or token not in entry.value.readers:
                return None
            readers = dict(entry.value.readers)
            if keep:
                readers[token] = time.time() + self._ttl_s
            else:
                del readers[token]
            if readers or entry.value.waiting_until > time.time():
                # kept while an instance waits to hold it alone, so no read comes first
                changed = msgspec.structs.replace(entry.value, readers=readers)
            else:
                changed = TurnRecord()
            try:
                await self._write(session_id, changed, entry.revision)
            except ChangedSince:
                entry = None  # another instance's read changed the record first: look again
                continue
            return entry.value

    @asynccontextmanager
    async def hold(
        self, session_id: str, *, wait_s: float | None = None, shared: bool = False
    ) -> AsyncIterator[bool]:
        """Hold the session's turn for the block, alone or (`shared`, a read) beside other
        reads; yields True when it was taken over from a holder that died (its leftovers
        are the new holder's to settle).

        Raises:
            TurnTimeout: others held it for longer than `wait_s` (by default, as long as a
                call may wait; 0: it was held at the first look).
        """
        wait_s = self._wait_s if wait_s is None else wait_s
        if shared:
            async with self._shared(session_id, wait_s) as taken_over:
                yield taken_over
            return
        revision, taken_over = await self._take(session_id, wait_s, None)
        held = _Held(revision)
        try:
            async with renewing(partial(self._renew, session_id, held), after_s=self._ttl_s / 3):
                yield taken_over
        finally:
            if not held.lost:
                with anyio.CancelScope(shield=True):
                    await self._give_back(session_id, held.revision)

    @asynccontextmanager
    async def _shared(self, session_id: str, wait_s: float) -> AsyncIterator[bool]:
        """A read's part of this instance's share of the turn: the first read in takes the
        share (one entry in the record), the last out gives it back; a read finding the
        share waited for waits for it to be given back and takes a new one."""
        share = self._shares.get(session_id)
        while share is not None and (share.closing or share.lost):
            await share.gone.wait()
            share = self._shares.get(session_id)
        if share is None:
            share = self._shares[session_id] = _Share(f"{self.holder}:{next(self._reads)}")
        share.count += 1
        taken_over = False
        try:
            async with share.taking:
                if not share.held:
                    _, taken_over = await self._take(session_id, wait_s, share.token)
                    share.held, share.renewed_at = True, time.monotonic()
            async with renewing(
                partial(self._renew_share, session_id, share), after_s=self._ttl_s / 3
            ):
                yield taken_over
        finally:
            share.count -= 1
            if not share.count:
                if self._shares.get(session_id) is share:
                    del self._shares[session_id]
                share.gone.set()
                if share.held and not share.lost:
                    with anyio.CancelScope(shield=True):
                        await self._give_back_share(session_id, share.token)

    async def _give_back_share(self, session_id: str, token: str) -> None:
        try:
            if await self._change_share(session_id, token, keep=False) is None:
                logger.warning(
                    "a session's shared turn was gone before it was given back",
                    extra={"session": session_id},
                )
        except nats.errors.Error as error:  # it expires on its own
            logger.warning(
                "a session's shared turn was not given back",
                extra={"session": session_id, "error_type": type(error).__name__},
            )

    async def _give_back(self, session_id: str, revision: int) -> None:
        try:
            await self._write(session_id, TurnRecord(), revision)
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
