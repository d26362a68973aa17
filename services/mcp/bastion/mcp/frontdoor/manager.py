"""The SDK's Streamable HTTP session manager, with sessions every replica can serve.

The SDK keeps session-based (2025-era) sessions in one process's memory, so a request that
reaches another replica answers 404. Here each session is also a record in KV (written once
its `initialize` succeeded): a replica asked about a session it does not hold, by the token
that began it, adopts it — a transport with the same session id, driving a connection born
initialized from the stored client params — instead of answering 404. Stateless requests
of the 2026-07-28 era never reach this code: the SDK serves each on its own.

A session ends for everyone when its client sends DELETE, or when the replica that last
served it finds it idle; a replica shutting down only lets go of its sessions. Each session
holds a slot of its token (`bastion.mcp.frontdoor.slots`) from before its `initialize` is
read until it ends; a token with none free is refused another session (429). A replica
serves its copy of a session only while the session holds its slot — asked at each request,
and at each renewal of the slots: a copy of a session ended on another replica (its record
gone) is let go of here, and answers 404, instead of living on without a slot; one whose
slot went otherwise (a replica that stopped gave it back) takes it again. A revoked
token's sessions are let go of on every replica (`bastion.mcp.frontdoor.revoking`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import anyio
import msgspec
from anyio.abc import TaskStatus
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    MCP_SESSION_ID_HEADER,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import InitializeRequestParams
from starlette.types import Message, Receive, Scope, Send

from bastion.mcp.frontdoor.bodies import read_body, replaying
from bastion.mcp.frontdoor.bodylimit import id_at_start
from bastion.mcp.frontdoor.guard import agent_of, jsonrpc_refusal
from bastion.mcp.frontdoor.httperrors import status_of
from bastion.mcp.frontdoor.opening import Unreadable, kept_params
from bastion.mcp.frontdoor.records import SessionRecords
from bastion.mcp.frontdoor.slots import SessionSlots
from bastion.mcp.frontdoor.spent import Spending
from bastion.proto.frontdoor import McpSessionRecord
from bastion.shared.errors import BastionError

__all__ = ["DoorManager"]

logger = logging.getLogger(__name__)

Ended = Callable[[str], Awaitable[None]]
ConnectionOf = Callable[[JSONRPCDispatcher[TransportContext]], Connection]
_ANSWERED_POLL_S = 0.05


class DoorManager(StreamableHTTPSessionManager):
    """Serves `/mcp` in both eras; session-based sessions are shared through `records`.

    `ended(mcp_session_id)` is awaited when a session ends for good (DELETE, or idle on the
    replica that owns it): it closes the Bastion session and forgets the record.
    """

    def __init__(
        self,
        app: Server[Any],
        *,
        records: SessionRecords,
        slots: SessionSlots,
        ended: Ended,
        replica: str,
        idle_timeout_s: float,
        max_request_bytes: int,
    ) -> None:
        # Host and Origin are checked by the guard in front; the SDK keeps its
        # Content-Type check, which it makes with protection off too. Its body limit, a
        # byte above the front door's (`bastion.mcp.frontdoor.bodylimit`), never answers.
        super().__init__(
            app,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            session_idle_timeout=idle_timeout_s,
            max_request_body_size=max_request_bytes + 1,
        )
        self._records = records
        self._slots = slots
        self._ended = ended
        self._replica = replica
        self._token_of: dict[str, str] = {}
        self._connections: dict[str, Connection] = {}

    def connection(self, session_id: str) -> Connection | None:
        """The live connection of session-based session `session_id` on this replica, once
        its client is initialized; None if it has none here."""
        found = self._connections.get(session_id)
        return found if found is not None and found.initialized.is_set() else None

    def connected(self) -> list[str]:
        """The session-based sessions with a live connection on this replica."""
        return list(self._connections)

    def held(self) -> dict[str, str]:
        """The session-based sessions this replica serves, each with its token's hash."""
        return dict(self._token_of)

    def tokens_here(self) -> set[str]:
        """The hashes of the tokens whose sessions this replica holds transports of."""
        return set(self._token_of.values())

    async def let_go_of_token(self, token_hash: str, answers_s: float) -> list[str]:
        """End this replica's transports of the sessions of `token_hash` (revoked): their
        streams close and later requests are not served here, as after a DELETE. A POST
        still being answered is given up to `answers_s` to send its answer first. The
        sessions' ids; their records and Bastion sessions are the caller's to end."""
        ended = [sid for sid, owner in self._token_of.items() if owner == token_hash]
        for session_id in ended:
            transport = self._server_instances.get(session_id)
            if transport is not None:
                with anyio.move_on_after(answers_s):
                    await _answered(transport)
                await transport.terminate()
        return ended

    async def slotless(self, session_ids: set[str]) -> None:
        """Settle the sessions `session_ids` whose slots are gone (`_settled`)."""
        for session_id in session_ids:
            await self._settled(session_id)

    async def _settled(self, session_id: str) -> bool:
        """Whether this replica's copy of `session_id`, whose slot is gone, serves on: when
        the session ended (its record is gone: a DELETE or an idle end on another replica)
        the copy is ended, its streams closed as at a DELETE, and False; when it is still
        open (its slot lapsed, or was given back by a replica that stopped) its slot is taken
        again, and True.

        Raises:
            Unavailable: NATS did not answer.
        """
        token_hash = self._token_of.get(session_id)
        transport = self._server_instances.get(session_id)
        if token_hash is None or transport is None:
            return False
        if await self._records.get(session_id) is not None:
            await self._slots.adopt(token_hash, session_id)
            return True
        logger.info(
            "an MCP session ended on another replica: let go of",
            extra={"mcp_session": session_id[:8]},
        )
        await transport.terminate()
        return False

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        agent = agent_of(scope)
        session_id = _header(scope, MCP_SESSION_ID_HEADER)
        if session_id is not None:
            adopted = False
            if session_id not in self._server_instances:
                if not await self._adopt(session_id, agent.token_hash):
                    await _not_found(scope, receive, send)
                    return
                adopted = True
            if self._token_of.get(session_id) != agent.token_hash:
                # Another agent's session answers exactly as an unknown one.
                await _not_found(scope, receive, send)
                return
            if not adopted and not await self._still_open(scope, receive, send, session_id):
                return
            if scope["method"] == "DELETE":
                # Closed before the answer, so a client that reads on after its DELETE
                # finds the Bastion session closed.
                await self._end(session_id)
                await self._give_back(agent.token_hash, session_id)
        await super()._handle_stateful_request(scope, receive, send)

    async def _still_open(
        self, scope: Scope, receive: Receive, send: Send, session_id: str
    ) -> bool:
        """Whether the session this replica holds a copy of is still open: it holds its slot,
        or is settled open (`_settled`). When it ended on another replica the copy is let go
        of and the request answered 404; when NATS does not answer, 503."""
        try:
            if await self._slots.holds(self._token_of[session_id], session_id):
                return True
            if await self._settled(session_id):
                return True
        except BastionError as error:
            refused = jsonrpc_refusal(status_of(error, 503), error.code, error.message)
            await refused(scope, receive, send)
            return False
        await _not_found(scope, receive, send)
        return False

    async def _adopt(self, session_id: str, token_hash: str) -> bool:
        """Serve a session another replica began; False when there is none for this token."""
        try:
            record = await self._records.get(session_id)
        except BastionError:
            return False
        if record is None or record.token_hash != token_hash:
            return False
        try:
            kept = kept_params(record.client_params_json)
        except Unreadable:
            return False
        client_params = InitializeRequestParams.model_validate_json(kept)

        def born_initialized(dispatcher: JSONRPCDispatcher[TransportContext]) -> Connection:
            connection = Connection(
                dispatcher,
                protocol_version=record.protocol_version,
                session_id=session_id,
                client_params=client_params,
            )
            connection.initialized.set()
            return connection

        async with self._session_creation_lock:
            if session_id in self._server_instances:
                return True
            # Connected before it is registered: a request of the session taken meanwhile
            # (it waits on the lock, or finds the session not here) never reaches a
            # transport whose streams are not there yet.
            transport = self._transport(session_id)
            assert self._task_group is not None
            await self._task_group.start(self._serve, transport, born_initialized)
            self._server_instances[session_id] = transport
            self._token_of[session_id] = token_hash
        await self._records.update(session_id, lambda r: _owned_by(r, self._replica))
        await self._slots.adopt(token_hash, session_id)
        logger.info("MCP session adopted", extra={"mcp_session": session_id[:8]})
        return True

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        transport = self._transport(uuid4().hex)
        assert transport.mcp_session_id is not None
        self._server_instances[transport.mcp_session_id] = transport
        return transport

    async def _serve_opening_request(
        self,
        http_transport: StreamableHTTPServerTransport,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Take a slot of the token, start the session, answer its `initialize`, and keep it
        in KV once it succeeded (a session that failed to open is discarded, as the SDK does,
        and gives its slot back)."""
        session_id = http_transport.mcp_session_id
        assert session_id is not None and self._task_group is not None
        opened: list[Connection] = []
        token_hash = agent_of(scope).token_hash
        body = await read_body(receive)
        if body is None:
            await self._discard_session(session_id, http_transport)
            return
        receive = replaying(body, receive)

        def fresh(dispatcher: JSONRPCDispatcher[TransportContext]) -> Connection:
            opened.append(Connection.for_loop(dispatcher, session_id=session_id))
            return opened[0]

        established = False
        try:
            try:
                await self._slots.take(token_hash, session_id)
            except BastionError as error:
                refused = jsonrpc_refusal(
                    status_of(error, 503), error.code, error.message, id_at_start(body)
                )
                await refused(scope, receive, send)
                return
            await self._task_group.start(self._serve, http_transport, fresh)
            status = await _status_of(http_transport.handle_request, scope, receive, send)
            established = status is not None and status < 400
            if established and opened and opened[0].client_params is not None:
                self._token_of[session_id] = token_hash
                await self._records.put(
                    McpSessionRecord(
                        mcp_session_id=session_id,
                        token_hash=token_hash,
                        protocol_version=opened[0].protocol_version,
                        client_params_json=opened[0].client_params.model_dump_json(
                            by_alias=True, exclude_none=True
                        ),
                        created_at=datetime.now(UTC),
                        owner=self._replica,
                    )
                )
            else:
                established = False
        finally:
            if not established:
                await self._discard_session(session_id, http_transport)
                await self._give_back(token_hash, session_id)

    async def _serve(
        self,
        transport: StreamableHTTPServerTransport,
        connection_of: ConnectionOf,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """One session's server task: the SDK's, with the connection built by `connection_of`."""
        session_id = transport.mcp_session_id
        assert session_id is not None
        idle = False
        async with transport.connect() as (read_stream, write_stream):
            dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                # each message let go of once dispatched, not held until the next comes
                Spending(read_stream),
                write_stream,
                inline_methods=frozenset({"initialize"}),
            )
            connection = connection_of(dispatcher)
            self._connections[session_id] = connection
            task_status.started()
            try:
                idle_scope = transport.idle_scope or anyio.CancelScope()
                with idle_scope:
                    await serve_connection(
                        self.app,
                        dispatcher,
                        connection=connection,
                        lifespan_state=self._lifespan_state,
                    )
                idle = idle_scope.cancelled_caught
            except Exception:
                logger.exception("MCP session crashed", extra={"mcp_session": session_id[:8]})
            finally:
                await self._discard_session(session_id, transport)
                self._token_of.pop(session_id, None)
                self._connections.pop(session_id, None)
        if idle:
            await self._expire(session_id)

    async def _expire(self, session_id: str) -> None:
        """An idle session ends for everyone only if this replica served it last."""
        with anyio.CancelScope(shield=True):
            try:
                record = await self._records.get(session_id)
            except BastionError:
                return
            if record is not None and record.owner == self._replica:
                logger.info("MCP session idle: ended", extra={"mcp_session": session_id[:8]})
                await self._end(session_id)
                await self._give_back(record.token_hash, session_id)

    async def _end(self, session_id: str) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self._ended(session_id)
            except BastionError as error:
                logger.warning(
                    "an ended MCP session was not closed cleanly",
                    extra={"mcp_session": session_id[:8], "code": error.code},
                )

    async def _give_back(self, token_hash: str, session_id: str) -> None:
        """Free an ended session's slot; if NATS does not answer, the slot lapses on its own."""
        with anyio.CancelScope(shield=True):
            try:
                await self._slots.give_back(token_hash, session_id)
            except BastionError as error:
                logger.warning(
                    "an ended MCP session's slot was not given back",
                    extra={"mcp_session": session_id[:8], "code": error.code},
                )

    def _transport(self, session_id: str) -> StreamableHTTPServerTransport:
        return StreamableHTTPServerTransport(
            mcp_session_id=session_id,
            is_json_response_enabled=self.json_response,
            event_store=self.event_store,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )


async def _answered(transport: StreamableHTTPServerTransport) -> None:
    """Return once the transport has no POST open: only its standing GET stream, if any."""
    while True:
        if all(key == GET_STREAM_KEY for key in transport._request_streams):
            return
        await anyio.sleep(_ANSWERED_POLL_S)


def _owned_by(record: McpSessionRecord, replica: str) -> McpSessionRecord:
    return msgspec.structs.replace(record, owner=replica)


def _header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode("latin-1")
    for key, value in scope["headers"]:
        if key == wanted:
            return bytes(value).decode("latin-1")
    return None


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    await jsonrpc_refusal(
        404,
        "not_found",
        "this MCP session is unknown or has ended (or is another agent's): start a new one "
        "with initialize",
    )(scope, receive, send)


async def _status_of(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    scope: Scope,
    receive: Receive,
    send: Send,
) -> int | None:
    """Run `app` for one request; the HTTP status it answered with (None if it sent none)."""
    status: int | None = None

    async def watch(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watch)
    return status
