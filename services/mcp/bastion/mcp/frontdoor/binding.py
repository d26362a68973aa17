"""Which Bastion session an MCP request acts in: opened lazily, with the token's profile.

A session-based MCP session gets its own Bastion session, opened at its first request that
needs one and kept in its KV record, so every replica acts in the same one. Stateless
(2026-07-28) requests carry no session: each token has one Bastion session for them, opened
the same way and kept under `token.<hash>`. Two replicas racing to open one settle it by
compare-and-set: the loser closes its own and takes the winner's. A session-based one
whose client declared form elicitation at `initialize` is opened as one a client answers
for (`OpenSession.elicits`): only its upstream servers are offered elicitation. A stateless
request has no channel back for an upstream's question, so its session has none.

As `bastion agent run` does, the front door marks each session's run: run-start once the
session is its MCP session's (or token's), run-end before it closes the session (the MCP
session deleted or idle past its time, the token revoked); the orchestrator asks the run
hooks (docs/hooks-and-audit.md).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import anyio
import msgspec
from mcp_types import InitializeRequestParams

from bastion.mcp.frontdoor.asking import declares_form_elicitation
from bastion.mcp.frontdoor.guard import Agent
from bastion.mcp.frontdoor.records import SessionRecords, stateless_key
from bastion.mcp.frontdoor.tokens import opening_of
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.frontdoor import McpSessionRecord
from bastion.proto.hooks import RunMark
from bastion.proto.session import SessionInfo, SessionRef
from bastion.shared.bus import Client, Requester
from bastion.shared.errors import BastionError, NotFound
from bastion.shared.runmarks import mark_run

__all__ = ["STATELESS_VERSION", "Binding"]

logger = logging.getLogger(__name__)

STATELESS_VERSION = "2026-07-28"


def _elicits(record: McpSessionRecord) -> bool:
    """Whether the MCP session's client declared form elicitation at `initialize`."""
    if not record.client_params_json:
        return False
    params = InitializeRequestParams.model_validate_json(record.client_params_json)
    return declares_form_elicitation(params.capabilities)


class Binding:
    """Finds, or opens, the Bastion session of an MCP request, and closes it at the end."""

    def __init__(self, client: Client, records: SessionRecords, timeout_s: float) -> None:
        self._bus = Requester(client, timeout_s)
        self._records = records
        self._known: dict[str, str] = {}
        self._locks: dict[str, anyio.Lock] = {}

    async def session_of(self, agent: Agent, mcp_session_id: str | None) -> str:
        """The Bastion session id for a request of `agent` in `mcp_session_id` (None:
        a stateless request).

        Raises:
            NotFound: the MCP session has ended.
            BastionError: the session could not be opened (the orchestrator's sentence).
        """
        key = mcp_session_id or stateless_key(agent.token_hash)
        known = self._known.get(key)
        if known is not None:
            return known
        async with self._lock(key):
            if key not in self._known:
                self._known[key] = await self._find_or_open(key, agent, mcp_session_id)
            return self._known[key]

    async def bound(self, mcp_session_id: str) -> str | None:
        """The Bastion session of MCP session `mcp_session_id` if it has one already (never
        opens one): known here, or read from its record."""
        known = self._known.get(mcp_session_id)
        if known is not None:
            return known
        record = await self._records.get(mcp_session_id)
        return (
            record.bastion_session_id if record is not None and record.bastion_session_id else None
        )

    async def info(self, session_id: str) -> SessionInfo:
        found: SessionInfo = await self._bus.ask(
            subjects.SESSION_GET, SessionRef(session_id=session_id), SessionInfo
        )
        return found

    async def closed(self, agent: Agent, mcp_session_id: str | None, session_id: str) -> None:
        """The request's Bastion session was found closed (an operator closed it). A token's
        stateless session is opened anew at its next request; an MCP session stays bound to
        the closed one, and its client starts a new session."""
        if mcp_session_id is not None:
            return
        key = stateless_key(agent.token_hash)
        self._known.pop(key, None)
        await self._records.update(
            key,
            lambda r: (
                msgspec.structs.replace(r, bastion_session_id="")
                if r.bastion_session_id == session_id
                else r
            ),
        )

    async def end(self, key: str, *, until_closed: bool = False) -> None:
        """Close the Bastion session of the MCP session (or token) `key`; forget its record.
        `until_closed`: the record is forgotten only once the close succeeded, so a later
        `end` tries again (a revoked token's, which no request can use any more)."""
        self._known.pop(key, None)
        record = await self._records.get(key)
        if not until_closed:
            await self._records.forget(key)
        if record is not None and record.bastion_session_id:
            await mark_run(
                self._bus.client,
                RunMark(session_id=record.bastion_session_id, event="run_end", ended="done"),
                self._bus.timeout_s,
            )
            if not await self._close(record.bastion_session_id):
                return
            logger.info(
                "MCP session ended: its Bastion session is closed",
                extra={"session": record.bastion_session_id},
            )
        if until_closed:
            await self._records.forget(key)

    async def _find_or_open(self, key: str, agent: Agent, mcp_session_id: str | None) -> str:
        record = await self._records.get(key)
        if record is not None and record.token_hash != agent.token_hash:
            raise NotFound("this MCP session is another agent's: start one with initialize")
        if record is not None and record.bastion_session_id:
            return record.bastion_session_id
        if record is None and mcp_session_id is not None:
            raise NotFound(
                f"MCP session {mcp_session_id[:8]}… has ended: start a new one with initialize"
            )
        opened = await self._open(agent, elicits=record is not None and _elicits(record))
        if record is None:
            kept = McpSessionRecord(
                mcp_session_id=key,
                token_hash=agent.token_hash,
                protocol_version=STATELESS_VERSION,
                client_params_json="",
                created_at=datetime.now(UTC),
                bastion_session_id=opened,
            )
            if await self._records.create(kept):
                return await self._started(opened)
        else:
            updated = await self._records.update(
                key,
                lambda r: (
                    r
                    if r.bastion_session_id
                    else msgspec.structs.replace(r, bastion_session_id=opened)
                ),
            )
            if updated is not None and updated.bastion_session_id == opened:
                return await self._started(opened)
        # Another replica opened one first: that one is the session.
        await self._close(opened)
        winner = await self._records.get(key)
        if winner is None or not winner.bastion_session_id:
            raise NotFound("this MCP session ended while it was being opened: initialize again")
        return winner.bastion_session_id

    async def _open(self, agent: Agent, *, elicits: bool) -> str:
        token = agent.info
        opened: SessionInfo = await self._bus.ask(
            subjects.SESSION_OPEN,
            opening_of(token, token_id=token.token_id, elicits=elicits),
            SessionInfo,
        )
        logger.info(
            "Bastion session opened for an MCP client",
            extra={"session": opened.session_id, "agent": token.agent, "token_id": token.token_id},
        )
        return opened.session_id

    async def _started(self, session_id: str) -> str:
        """`session_id`, once its run-start hooks were told (what they add is logged: an
        MCP client has no place to be shown it)."""
        notes = await mark_run(
            self._bus.client, RunMark(session_id=session_id, event="run_start"), self._bus.timeout_s
        )
        for note in notes:
            logger.info(
                "a run-start hook added a note", extra={"session": session_id, "note": note}
            )
        return session_id

    async def _close(self, session_id: str) -> bool:
        """Close the session; whether it is closed now (or never was: it is unknown)."""
        try:
            await self._bus.ask(
                subjects.SESSION_CLOSE, SessionRef(session_id=session_id), SessionInfo
            )
        except BastionError as error:
            if error.code == codes.NOT_FOUND:
                return True
            logger.warning(
                "a Bastion session was not closed",
                extra={"session": session_id, "code": error.code},
            )
            return False
        return True

    @asynccontextmanager
    async def _lock(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, anyio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(key, None)
