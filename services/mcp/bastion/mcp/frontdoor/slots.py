"""How many session-based MCP sessions each agent token keeps open, counted across replicas.

A session takes a slot of its token before the SDK reads its `initialize` and gives it back
when it ends for good (its client's DELETE, its idle end) or fails to open; a token whose
slots are all taken (`BASTION_MCP_MAX_SESSIONS_PER_TOKEN`) is refused another session.
The slots are one record per token in KV `bastion_mcp_session_slots`, changed by
compare-and-set, so every replica counts the same sessions. Each slot lapses
`BASTION_MCP_SESSION_SLOT_S` after it was last renewed: a replica renews the slots of the
sessions it serves every third of that, and gives them back when it stops, so the slots of
a replica that died lapse on their own instead of being held for good. A session another
replica adopts takes its slot again, over the cap if need be: it was counted when it opened.
A session's slot is also what says it is still open: a replica serves its copy of a session
only while the session holds its slot (`holds`, asked at each request), and hands its copies
whose slots are gone to its manager when it renews (which lets go of those that ended, a
DELETE or idle end on another replica, and takes the slot again of the others).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Final

import anyio
import nats.errors

from bastion.proto import subjects
from bastion.proto.frontdoor import McpSessionSlots
from bastion.shared.background import in_background
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError, QuotaExceeded, Unavailable
from bastion.shared.kv import TypedBucket

__all__ = ["LIMIT_SETTING", "SessionSlots", "TooManySessions"]

logger = logging.getLogger(__name__)

LIMIT_SETTING: Final = "BASTION_MCP_MAX_SESSIONS_PER_TOKEN"
_ATTEMPTS: Final = 30
"""Compare-and-set attempts of a change of one token's slots (sessions opening at once race
for the one record)."""


class TooManySessions(QuotaExceeded):
    """The token keeps open as many MCP sessions as it may."""

    def __init__(self, held: int, limit: int) -> None:
        super().__init__(
            f"this agent token already has {held} MCP sessions open or opening, the most it "
            f"may keep ({LIMIT_SETTING}={limit}): close sessions it no longer uses (an HTTP "
            "DELETE of /mcp with their Mcp-Session-Id) or wait for idle ones to end, then "
            "initialize again"
        )


def _live(slots: McpSessionSlots | None, now: datetime) -> dict[str, datetime]:
    """The slots that have not lapsed."""
    return {} if slots is None else {s: until for s, until in slots.held.items() if until > now}


class SessionSlots:
    """Take, renew and give back the slots of tokens' MCP sessions."""

    def __init__(self, bucket: TypedBucket[McpSessionSlots], limit: int, slot_s: float) -> None:
        self._bucket = bucket
        self._limit = limit
        self._slot = timedelta(seconds=slot_s)

    @classmethod
    async def open(cls, client: Client, limit: int, slot_s: float) -> SessionSlots:
        """The slots, at most `limit` a token, each lasting `slot_s` unless renewed."""
        bucket = await TypedBucket.open(client, subjects.FRONTDOOR_SLOTS_BUCKET, McpSessionSlots)
        return cls(bucket, limit, slot_s)

    async def take(self, token_hash: str, session_id: str) -> None:
        """A slot of `token_hash` for the session `session_id`, about to open.

        Raises:
            TooManySessions: the token holds `limit` slots already.
            Unavailable: NATS did not answer.
            KeptChanging: other sessions of the token kept taking slots meanwhile.
        """

        def taken(slots: McpSessionSlots | None) -> McpSessionSlots:
            now = datetime.now(UTC)
            live = _live(slots, now)
            if len(live) >= self._limit:
                raise TooManySessions(len(live), self._limit)
            return McpSessionSlots(held=live | {session_id: now + self._slot})

        await self._change(token_hash, taken)

    async def adopt(self, token_hash: str, session_id: str) -> None:
        """The slot of a session this replica serves from now on, taken whatever the count."""
        await self._change(
            token_hash,
            lambda slots: McpSessionSlots(
                held=_live(slots, datetime.now(UTC)) | {session_id: datetime.now(UTC) + self._slot}
            ),
        )

    async def holds(self, token_hash: str, session_id: str) -> bool:
        """Whether the session `session_id` of `token_hash` still holds its slot (it has not
        ended on any replica).

        Raises:
            Unavailable: NATS did not answer.
        """
        try:
            found = await self._bucket.find(token_hash)
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the MCP session slots could not be read from NATS: retry") from None
        return found is not None and session_id in _live(found.value, datetime.now(UTC))

    async def give_back(self, token_hash: str, session_id: str) -> None:
        """Free the slot of `session_id`, ended or never opened (nothing if it holds none)."""

        def freed(slots: McpSessionSlots | None) -> McpSessionSlots | None:
            if slots is None or session_id not in slots.held:
                return None
            live = _live(slots, datetime.now(UTC))
            live.pop(session_id, None)
            return McpSessionSlots(held=live)

        await self._change(token_hash, freed)

    async def renew(self, held: Mapping[str, str]) -> set[str]:
        """Renew the slots of the sessions `held` (session id → token hash) that still hold
        one: a session given back elsewhere (a DELETE on another replica) is not taken again.
        The sessions of `held` that hold none (ended): their copies here are to be let go of."""
        by_token: dict[str, set[str]] = {}
        for session_id, token_hash in held.items():
            by_token.setdefault(token_hash, set()).add(session_id)
        ended: set[str] = set()
        for token_hash, sessions in by_token.items():
            gone: set[str] = set()

            def renewed(
                slots: McpSessionSlots | None, sessions: set[str] = sessions
            ) -> McpSessionSlots | None:
                nonlocal gone
                gone = sessions - (set() if slots is None else slots.held.keys())
                if slots is None or not sessions & slots.held.keys():
                    return None
                until = datetime.now(UTC) + self._slot
                live = _live(slots, datetime.now(UTC))
                return McpSessionSlots(held=live | {s: until for s in sessions if s in slots.held})

            await self._change(token_hash, renewed)
            ended |= gone
        return ended

    @asynccontextmanager
    async def renewing(
        self,
        held: Callable[[], Mapping[str, str]],
        ended: Callable[[set[str]], Awaitable[None]],
    ) -> AsyncIterator[None]:
        """While the block runs, renew the slots of the sessions `held()` names every third
        of a slot's life, and hand those that hold none to `ended` (their copies here to be
        settled: let go of, or their slots taken again); when it ends (the replica stops),
        give them back."""

        async def renew_all() -> None:
            while True:
                await anyio.sleep(self._slot.total_seconds() / 3)
                try:
                    gone = await self.renew(held())
                    if gone:
                        await ended(gone)
                except BastionError as error:
                    logger.warning("MCP session slots were not renewed", extra={"code": error.code})

        try:
            async with in_background(renew_all):
                yield
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                for session_id, token_hash in dict(held()).items():
                    try:
                        await self.give_back(token_hash, session_id)
                    except BastionError:
                        break  # NATS is gone: the slots lapse on their own

    async def _change(
        self,
        token_hash: str,
        change: Callable[[McpSessionSlots | None], McpSessionSlots | None],
    ) -> None:
        try:
            await self._bucket.update(
                token_hash,
                change,
                attempts=_ATTEMPTS,
                conflict="this agent token's MCP sessions kept changing while one opened or "
                "closed: try again",
            )
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the MCP session slots could not be read from NATS: retry") from None
