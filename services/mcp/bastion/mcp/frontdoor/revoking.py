"""A revoked token's end: its calls cancelled, its MCP sessions ended on every replica, and
each one's Bastion session closed (which stops its background tasks).

The replica that revokes the token tells every front door on `frontdoor.tokens.revoked`
(`TokenWithdrawn`); each cancels the calls it runs for the token (`session.<id>.cancel`,
by `mcp:token <id> revoked`) and ends its transports of the token's MCP sessions, as a
DELETE would. The revoking replica then ends every MCP session record of the token in
`bastion_mcp_sessions` — the stateless one too — whichever replica served it: run-end,
then the Bastion session's close, which ends its tasks `cancelled` and its parked calls.

Nothing of this depends on the revoking replica staying up or on the broadcast arriving:
every replica sweeps every `BASTION_MCP_REVOKED_SWEEP_S` — the calls it runs and the
transports it holds, of a token no longer in `bastion_agent_tokens`, are ended as above,
and so is every record of such a token, whoever served it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from typing import Final

import anyio
import nats.errors
from nats.aio.msg import Msg

from bastion.mcp.frontdoor.binding import Binding
from bastion.mcp.frontdoor.cancelling import CANCEL_WAIT_S, cancel_call
from bastion.mcp.frontdoor.manager import DoorManager
from bastion.mcp.frontdoor.records import SessionRecords
from bastion.mcp.frontdoor.tokens import TokenStore
from bastion.proto import subjects
from bastion.proto.frontdoor import McpSessionRecord, TokenWithdrawn
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BastionError

__all__ = ["Revocations", "TokenCalls"]

logger = logging.getLogger(__name__)

ANSWERS_S: Final = 5.0
"""How long a revoked token's MCP session's POSTs still being answered (a cancelled call's
`cancelled`) have to send their answers before its transport is ended."""


class TokenCalls:
    """The calls this replica runs now, by token: (Bastion session id, call id)s by the
    token's hash."""

    def __init__(self) -> None:
        self._calls: dict[str, dict[tuple[str, str], int]] = {}
        self._drained: dict[str, anyio.Event] = {}

    @contextmanager
    def holding(self, token_hash: str, session_id: str, call_id: str) -> Iterator[None]:
        """Count the call as running for `token_hash` while the block runs."""
        calls = self._calls.setdefault(token_hash, {})
        key = (session_id, call_id)
        calls[key] = calls.get(key, 0) + 1
        try:
            yield
        finally:
            calls[key] -= 1
            if not calls[key]:
                del calls[key]
            if not calls:
                self._calls.pop(token_hash, None)
                drained = self._drained.pop(token_hash, None)
                if drained is not None:
                    drained.set()

    def of_token(self, token_hash: str) -> list[tuple[str, str]]:
        return list(self._calls.get(token_hash, {}))

    def tokens(self) -> set[str]:
        return set(self._calls)

    async def drained(self, token_hash: str) -> None:
        """Return once no call of `token_hash` runs here (each was answered)."""
        if token_hash in self._calls:
            await self._drained.setdefault(token_hash, anyio.Event()).wait()


def _by(token_hash: str) -> str:
    # A cancel's `by`, as the audit log shows it: the token by its id (`token list`'s).
    return f"mcp:token {token_hash[:16]} revoked"


@dataclass(frozen=True, kw_only=True)
class Revocations:
    """Ends what a revoked token has: told at its revoke, found by a sweep otherwise."""

    client: Client
    tokens: TokenStore
    records: SessionRecords
    binding: Binding
    manager: DoorManager
    calls: TokenCalls
    sweep_s: float
    """How often the sweep runs (`BASTION_MCP_REVOKED_SWEEP_S`)."""

    async def revoked(self, token_hash: str) -> None:
        """The token was just revoked here: every replica is told, then every MCP session
        of it is ended and its Bastion session closed, whichever replica served it."""
        told = TokenWithdrawn(token_hash=token_hash)
        await self.client.publish(subjects.FRONTDOOR_TOKEN_REVOKED, encode(told))
        try:
            records = await self.records.of_token(token_hash)
        except BastionError as error:
            # The token is gone: the sweeps end its sessions.
            logger.warning(
                "a revoked token's MCP sessions could not be read", extra={"code": error.code}
            )
            records = []
        async with anyio.create_task_group() as group:
            group.start_soon(self.withdraw_here, token_hash)
            group.start_soon(self._end_records, records)

    async def withdraw_here(self, token_hash: str) -> None:
        """Cancel the calls this replica runs for the token, then — once their handlers
        answered them (`cancelled`), or after the cancel's own wait — end its transports of
        the token's MCP sessions (their streams close, as at a DELETE)."""
        calls = self.calls.of_token(token_hash)
        async with anyio.create_task_group() as group:
            for session_id, call_id in calls:
                group.start_soon(cancel_call, self.client, session_id, call_id, _by(token_hash))
        with anyio.move_on_after(CANCEL_WAIT_S):
            await self.calls.drained(token_hash)
        ended = await self.manager.let_go_of_token(token_hash, ANSWERS_S)
        if calls or ended:
            logger.info(
                "a revoked token's calls and MCP sessions here were ended",
                extra={"token_id": token_hash[:16], "calls": len(calls), "sessions": len(ended)},
            )

    async def sweep(self) -> None:
        """End what this replica holds of a token that is gone, and every record of one."""
        for token_hash in self.calls.tokens() | self.manager.tokens_here():
            if not await self.tokens.live(token_hash):
                await self.withdraw_here(token_hash)
        records = await self.records.every()
        live: dict[str, bool] = {}
        for token_hash in {r.token_hash for r in records}:
            live[token_hash] = await self.tokens.live(token_hash)
        await self._end_records([r for r in records if not live[r.token_hash]])

    async def _end_records(self, records: list[McpSessionRecord]) -> None:
        async with anyio.create_task_group() as group:
            for record in records:
                group.start_soon(self._end, record.mcp_session_id)

    async def _end(self, key: str) -> None:
        try:
            await self.binding.end(key, until_closed=True)
        except BastionError as error:
            # The record is kept: the next sweep, of any replica, ends it.
            logger.warning(
                "a revoked token's MCP session was not ended", extra={"code": error.code}
            )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Hear `frontdoor.tokens.revoked`, and sweep, for as long as the block runs."""
        async with anyio.create_task_group() as group:

            async def told(message: Msg) -> None:
                try:
                    withdrawn = decode(message.data, TokenWithdrawn)
                except BastionError:
                    logger.warning("a message on the token-revoked subject was not one")
                    return
                group.start_soon(self.withdraw_here, withdrawn.token_hash)

            heard = await self.client.subscribe(subjects.FRONTDOOR_TOKEN_REVOKED, cb=told)
            group.start_soon(self._sweeping)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                with suppress(nats.errors.ConnectionClosedError):
                    await heard.unsubscribe()

    async def _sweeping(self) -> None:
        while True:
            await anyio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except BastionError as error:
                logger.warning("the revoked tokens' sweep failed", extra={"code": error.code})
