"""The MCP SDK's internals the front door reaches into, exercised: an upgrade breaks here first.

pyproject pins `mcp~=2.3.0` because `bastion.mcp.frontdoor.manager.DoorManager` subclasses
`StreamableHTTPSessionManager` and overrides or uses its private members, builds its own
`Connection`, `JSONRPCDispatcher` (over `bastion.mcp.frontdoor.spent`'s read stream, typed with
`mcp.shared._stream_protocols`) and `serve_connection` loop, and `bastion.mcp.gateway.upstream`
types its transports with `mcp.client._transport`. Each test names one of those; the last
drives a real session through two `DoorManager`s (two replicas) over NATS KV, which is the
path those internals serve.
"""

from __future__ import annotations

import dataclasses
import inspect
import tomllib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp.client._transport as client_transport
import pytest
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    MCP_SESSION_ID_HEADER,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._context_streams import create_context_streams
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCRequest
from starlette.types import Receive, Scope, Send

from bastion.mcp.frontdoor.guard import AGENT_KEY, Agent
from bastion.mcp.frontdoor.manager import DoorManager
from bastion.mcp.frontdoor.records import SessionRecords
from bastion.mcp.frontdoor.slots import SessionSlots
from bastion.mcp.frontdoor.spent import SPENT, Spending
from bastion.proto.frontdoor import TokenInfo
from bastion.shared.bus import Client

ROOT = Path(__file__).resolve().parents[2]
TOKEN_HASH = "ab" * 32
LEGACY_VERSION = "2025-06-18"  # a session-based (handshake) era the manager serves statefully


def _params(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_installed_sdk_is_the_minor_pyproject_pins() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "mcp~=2.3.0" in project["project"]["dependencies"]
    assert metadata.version("mcp").startswith("2.3.")


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("_handle_stateful_request", ["self", "scope", "receive", "send"]),
        ("_admit_session", ["self", "requestor"]),
        ("_serve_opening_request", ["self", "http_transport", "scope", "receive", "send"]),
        ("_discard_session", ["self", "session_id", "transport"]),
    ],
)
def test_the_session_managers_private_methods_door_manager_overrides_or_calls_are_there(
    name: str, parameters: list[str]
) -> None:
    assert _params(getattr(StreamableHTTPSessionManager, name)) == parameters


def test_the_session_managers_state_door_manager_reads_is_there_before_and_while_running() -> None:
    manager = StreamableHTTPSessionManager(Server("contract"), session_idle_timeout=60)
    assert manager._server_instances == {}
    assert isinstance(manager._session_creation_lock, anyio.Lock)
    assert manager._task_group is None and manager._lifespan_state is None
    for public in ("app", "max_sessions", "json_response", "event_store", "security_settings"):
        assert hasattr(manager, public), public
    assert manager.retry_interval is None and manager.session_idle_timeout == 60

    async def running() -> None:
        async with manager.run():
            assert manager._task_group is not None

    anyio.run(running)


def test_the_pieces_door_manager_builds_a_session_from_take_the_arguments_it_gives() -> None:
    assert _params(StreamableHTTPServerTransport.__init__)[:7] == [
        "self",
        "mcp_session_id",
        "is_json_response_enabled",
        "event_store",
        "security_settings",
        "retry_interval",
        "idle_timeout",
    ]
    assert {"connect", "handle_request", "idle_scope", "mcp_session_id", "terminate"} <= set(
        dir(StreamableHTTPServerTransport(mcp_session_id="x"))
    )
    # A revoked token's transport is ended once its POSTs were answered: the streams open
    # are read, the standing GET stream's key told apart (`DoorManager.let_go_of_token`).
    assert StreamableHTTPServerTransport(mcp_session_id="x")._request_streams == {}
    assert isinstance(GET_STREAM_KEY, str)
    assert "inline_methods" in _params(JSONRPCDispatcher.__init__)
    assert {"connection", "lifespan_state"} <= set(_params(serve_connection))
    assert {"protocol_version", "session_id", "client_params"} <= set(_params(Connection.__init__))
    assert "session_id" in _params(Connection.for_loop)


def test_the_dispatcher_hands_each_message_on_before_it_reads_the_next() -> None:
    # `bastion.mcp.frontdoor.spent.Spending` empties the `SessionMessage` read last once the
    # dispatcher asks for the next: the request's handler must have its params by then.
    assert {"message", "metadata"} <= {f.name for f in dataclasses.fields(SessionMessage)}
    assert not SessionMessage.__dataclass_params__.frozen  # type: ignore[attr-defined]
    seen: list[Any] = []

    async def on_request(_ctx: Any, method: str, params: Any) -> dict[str, Any]:
        seen.append((method, dict(params or {})))
        return {}

    async def on_notify(_ctx: Any, method: str, params: Any) -> None:
        seen.append((method, dict(params or {})))

    async def dispatched() -> tuple[SessionMessage, Any]:
        to_server, from_client = create_context_streams[SessionMessage | Exception](0)
        to_client, from_server = create_context_streams[SessionMessage](1)
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(Spending(from_client), to_client)
        first = SessionMessage(
            JSONRPCRequest(jsonrpc="2.0", id=1, method="ping", params={"x": [1]})
        )
        async with anyio.create_task_group() as group:
            await group.start(dispatcher.run, on_request, on_notify)
            async with to_server, from_server:
                await to_server.send(first)
                answer = await from_server.receive()
                await to_server.send(
                    SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="notifications/x"))
                )
                spent = first.message
            with anyio.fail_after(5):
                while len(seen) < 2:  # noqa: ASYNC110 (the notification's handler runs apart)
                    await anyio.sleep(0.01)
        return answer, spent

    answer, spent = anyio.run(dispatched)
    assert seen[0] == ("ping", {"x": [1]})
    assert answer.message.id == 1
    assert spent is SPENT


def test_the_private_transport_module_upstream_types_its_streams_with_is_there() -> None:
    for name in ("ReadStream", "WriteStream", "TransportStreams"):
        assert hasattr(client_transport, name), name


def _as_agent(manager: DoorManager) -> Any:
    """`manager` behind what the guard leaves in the scope: one agent's token."""
    agent = Agent(
        token_hash=TOKEN_HASH,
        info=TokenInfo(
            token_id="0123456789abcdef",
            agent="contract",
            tenant="acme",
            autonomy="L3",
            created_at=datetime.now(UTC),
        ),
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scope[AGENT_KEY] = agent
        await manager.handle_request(scope, receive, send)

    return app


@asynccontextmanager
async def _replica(
    records: SessionRecords, slots: SessionSlots, ended: list[str], name: str
) -> AsyncIterator[tuple[DoorManager, httpx.AsyncClient]]:
    async def end(session_id: str) -> None:
        ended.append(session_id)

    manager = DoorManager(
        Server("contract"),
        records=records,
        slots=slots,
        ended=end,
        replica=name,
        idle_timeout_s=60,
        max_request_bytes=1024 * 1024,
    )
    transport = httpx.ASGITransport(app=_as_agent(manager))
    async with (
        manager.run(),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
    ):
        yield manager, http


def _rpc(method: str, ident: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}


async def test_a_session_begun_on_one_replica_is_adopted_and_ended_by_another(
    client: Client,
) -> None:
    records = await SessionRecords.open(client)
    slots = await SessionSlots.open(client, limit=8, slot_s=60)
    ended: list[str] = []
    accept = {"Accept": "application/json, text/event-stream"}
    with anyio.fail_after(30):
        async with AsyncExitStack() as stack:
            first, first_http = await stack.enter_async_context(
                _replica(records, slots, ended, "one")
            )
            second, second_http = await stack.enter_async_context(
                _replica(records, slots, ended, "two")
            )
            opened = await first_http.post(
                "/mcp",
                json=_rpc(
                    "initialize",
                    1,
                    {
                        "protocolVersion": LEGACY_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "contract", "version": "1"},
                    },
                ),
                headers=accept,
            )
            assert opened.status_code == 200, opened.text
            session_id = opened.headers[MCP_SESSION_ID_HEADER]
            assert session_id in first._server_instances
            record = await records.get(session_id)
            assert record is not None and record.owner == "one"

            in_session = {
                **accept,
                MCP_SESSION_ID_HEADER: session_id,
                "MCP-Protocol-Version": LEGACY_VERSION,
            }
            pinged = await second_http.post("/mcp", json=_rpc("ping", 2), headers=in_session)
            assert pinged.status_code == 200, pinged.text
            assert '"result":{}' in pinged.text.replace(" ", "")
            assert session_id in second._server_instances
            adopted = await records.get(session_id)
            assert adopted is not None and adopted.owner == "two"

            deleted = await second_http.delete("/mcp", headers=in_session)
            assert deleted.status_code < 300, deleted.text
            assert ended == [session_id]
            assert session_id not in second._server_instances
