"""Caps on the sessions open at once, per tenant and per front-door token, across replicas.

Each tenant (and each token a session was opened for) has a record in the sessions bucket,
`open.tenant.<hex of the name>` / `open.token.<token id>`, listing its open sessions and
when each was counted. An open adds its session by compare-and-set before the session is
stored, so replicas racing for the last place cannot both take it; a close removes it. A
record can outlive what it counts (an orchestrator killed between the two steps): when a
cap is reached, the sessions listed are looked up first (at most every
`_LOOKUP_EVERY_S` per record), and those closed, or never stored within
`_UNSTORED_GRACE_S`, are dropped from the count.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Final

import anyio
import msgspec
import nats.errors

from bastion.orchestrator.store import SessionStore
from bastion.proto.session import SessionInfo
from bastion.shared.errors import BastionError, NotFound, QuotaExceeded

__all__ = ["OpenCaps"]

logger = logging.getLogger(__name__)

_UNSTORED_GRACE_S: Final = 300.0
"""A counted session not stored after this long was never opened (its open failed)."""
_ATTEMPTS: Final = 50
_LOOKUP_EVERY_S: Final = 10.0
"""An instance looks a full record's sessions up at most this often: a caller at its cap
cannot make each refused open cost a lookup of every session counted."""


class _Open(msgspec.Struct, frozen=True, kw_only=True):
    """The sessions a tenant or token has open: session id to when it was counted."""

    sessions: dict[str, float] = msgspec.field(default_factory=dict)


_Change = Callable[["_Open"], Awaitable["_Open"]]


async def _without(session_id: str, found: _Open) -> _Open:
    return _Open(sessions={k: v for k, v in found.sessions.items() if k != session_id})


@dataclass(frozen=True)
class _Cap:
    key: str
    limit: int
    refusal: str


class OpenCaps:
    """Counts open sessions per tenant and per token; 0 turns a cap off."""

    def __init__(self, store: SessionStore, per_tenant: int, per_token: int) -> None:
        self._store = store
        self._counts = store.bucket.holding(_Open)
        self._per_tenant = per_tenant
        self._per_token = per_token
        self._locks: dict[str, anyio.Lock] = {}
        self._looked_up: dict[str, float] = {}

    def _caps(self, tenant: str, token_id: str) -> list[_Cap]:
        caps = []
        if self._per_tenant:
            caps.append(
                _Cap(
                    f"open.tenant.{tenant.encode().hex()}",
                    self._per_tenant,
                    f"tenant {tenant} has {self._per_tenant} sessions open, its cap "
                    "(BASTION_MAX_SESSIONS_PER_TENANT): close sessions it no longer needs "
                    "(bastion session close ID) to make room, or raise the cap",
                )
            )
        if self._per_token and token_id:
            caps.append(
                _Cap(
                    f"open.token.{token_id}",
                    self._per_token,
                    f"token {token_id} has {self._per_token} sessions open, its cap "
                    "(BASTION_MAX_SESSIONS_PER_TOKEN): end MCP sessions it no longer needs "
                    "(an HTTP DELETE of the session, or close them with bastion session "
                    "close ID) to make room, or raise the cap",
                )
            )
        return caps

    @asynccontextmanager
    async def opening(self, session_id: str, tenant: str, token_id: str) -> AsyncIterator[None]:
        """Count `session_id` against its tenant's and token's caps while it is opened; it
        stays counted if the block ends normally (the session is stored), else not.

        Raises:
            QuotaExceeded: a cap is reached; nothing is counted then.
        """
        counted: list[str] = []
        try:
            for cap in self._caps(tenant, token_id):
                await self._change(cap.key, partial(self._add, cap, session_id))
                counted.append(cap.key)
            yield
        except BaseException:
            with anyio.CancelScope(shield=True):
                for key in counted:
                    await self._change(key, partial(_without, session_id))
            raise

    async def closed(self, session: SessionInfo) -> None:
        """A session was closed: it no longer counts. A failure is logged, not raised: the
        session is closed either way, and the cap's next lookup drops it from the count."""
        for cap in self._caps(session.tenant, session.token_id):
            try:
                await self._change(cap.key, partial(_without, session.session_id))
            except (BastionError, nats.errors.Error) as error:
                logger.warning(
                    "a closed session was not taken off its open-session count",
                    extra={"session": session.session_id, "error_type": type(error).__name__},
                )

    async def _add(self, cap: _Cap, session_id: str, found: _Open) -> _Open:
        sessions = dict(found.sessions)
        now = time.monotonic()
        if len(sessions) >= cap.limit and now - self._looked_up.get(cap.key, -1e9) > (
            _LOOKUP_EVERY_S
        ):
            self._looked_up[cap.key] = now
            sessions = await self._still_open(sessions)
        if len(sessions) >= cap.limit:
            raise QuotaExceeded(cap.refusal)
        sessions[session_id] = time.time()
        return _Open(sessions=sessions)

    async def _still_open(self, sessions: dict[str, float]) -> dict[str, float]:
        """The sessions listed that are open, or being opened, by the store."""
        kept = {}
        now = time.time()
        for session_id, counted_at in sessions.items():
            try:
                session, _ = await self._store.get(session_id)
            except NotFound:
                if now - counted_at < _UNSTORED_GRACE_S:
                    kept[session_id] = counted_at
                continue
            if session.state != "closed":
                kept[session_id] = counted_at
        return kept

    async def _change(self, key: str, change: _Change) -> None:
        """Apply `change` to the record at `key` by compare-and-set, one change at a time
        in this instance and retried when another replica's came first."""

        async def changed(found: _Open | None) -> _Open:
            return await change(_Open() if found is None else found)

        lock = self._locks.setdefault(key, anyio.Lock())
        try:
            async with lock:
                await self._counts.update(
                    key,
                    changed,
                    attempts=_ATTEMPTS,
                    conflict=f"the count of open sessions ({key}) kept changing; retry",
                )
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(key, None)
