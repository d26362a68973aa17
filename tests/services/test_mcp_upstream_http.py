"""Servers over HTTP: Streamable HTTP, the legacy HTTP+SSE transport found after the POST
is refused, bounded responses, and the route out through the egress proxy."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import types

from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.mcp.gateway.upstream import (
    UpstreamNoAnswer,
    UpstreamUnreachable,
    grant_for,
    open_upstream,
)
from bastion.proto import subjects
from bastion.proto.egress import ConnectionLog, ConnectionsRequest
from bastion.proto.mcp import McpServerSpec
from bastion.shared.bus import Client, request
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import RESOLVER, Egress, guard_network
from tests.helpers.mcp_upstream import NOTES, SERVERS, serving_http

MISBEHAVING = SERVERS / "misbehaving.py"
SESSION = "0123456789abcdef"


def _text(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


def _spec(url: str, *headers: str) -> McpServerSpec:
    return McpServerSpec(transport="http", url=url, headers=headers)


async def test_the_notes_server_over_streamable_http(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with (
            serving_http(NOTES, tmp_path, "--http") as port,
            open_upstream(
                _spec(f"http://127.0.0.1:{port}/mcp", "X-Team: ${TEAM}"),
                server="notes",
                values={"TEAM": "blue"},
            ) as notes,
        ):
            tools = await notes.list_tools()
            added = await notes.call_tool("add_note", {"name": "a", "text": "b"}, timeout_s=10)
            read = await notes.call_tool("read_note", {"name": "a"}, timeout_s=10)
    assert notes.protocol == "2026-07-28"
    assert (notes.server_name, notes.server_version) == ("notes", "1.0")
    assert len(tools) == 4
    assert (_text(added), _text(read)) == ("kept note a", "b")


async def test_a_legacy_sse_server_is_found_after_its_post_is_refused(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with (
            serving_http(MISBEHAVING, tmp_path, "--sse") as port,
            open_upstream(_spec(f"http://127.0.0.1:{port}/sse"), server="old", values={}) as old,
        ):
            names = {tool.name for tool in await old.list_tools()}
            pid = _text(await old.call_tool("pid", {}, timeout_s=10))
    assert {"pid", "huge"} <= names
    assert pid.isdigit()


@pytest.mark.parametrize(
    ("flag", "path"), [("--http", "mcp"), ("--json-http", "mcp"), ("--sse", "sse")]
)
async def test_an_http_answer_over_the_size_limit_is_no_answer(
    tmp_path: Path, flag: str, path: str
) -> None:
    with anyio.fail_after(30):
        async with serving_http(MISBEHAVING, tmp_path, flag) as port:
            spec = _spec(f"http://127.0.0.1:{port}/{path}")
            async with open_upstream(spec, server="bad", values={}) as bad:
                with pytest.raises(UpstreamNoAnswer) as no_answer:
                    await bad.call_tool("huge", {}, timeout_s=10)
                assert not bad.alive
            async with open_upstream(spec, server="bad", values={}) as again:
                assert _text(await again.call_tool("pid", {}, timeout_s=10)).isdigit()
    assert no_answer.value.message.startswith("the MCP server bad sent a message over ")


async def test_a_header_naming_a_variable_without_a_value_is_refused_before_connecting() -> None:
    spec = _spec("http://127.0.0.1:9/mcp", "Authorization: Bearer ${TOKEN}")
    with pytest.raises(UpstreamUnreachable, match=r"names \$\{TOKEN\}, which has no value"):
        async with open_upstream(spec, server="api", values={}):
            pass


async def test_without_an_egress_route_only_a_loopback_url_is_reached() -> None:
    spec = _spec("https://mcp.example.com/mcp")
    with pytest.raises(UpstreamUnreachable, match="leaves only through the egress service"):
        async with open_upstream(spec, server="far", values={}):
            pass


async def test_a_server_that_is_not_listening_is_unreachable_with_its_url() -> None:
    spec = _spec("http://user:pw@127.0.0.1:9/mcp?key=k")
    with pytest.raises(UpstreamUnreachable) as unreachable:
        async with open_upstream(spec, server="down", values={}):
            pass
    assert unreachable.value.message.startswith(
        "the MCP server down at http://127.0.0.1:9/mcp could not be reached"
    )
    assert "pw" not in unreachable.value.message and "key" not in unreachable.value.message


async def test_http_goes_through_the_egress_proxy_under_a_grant_and_is_recorded(
    tmp_path: Path,
    egress_loopback_allowed: Egress,
) -> None:
    egress = egress_loopback_allowed
    with anyio.fail_after(30):
        async with serving_http(NOTES, tmp_path, "--http") as port:
            url = f"http://127.0.0.1:{port}/mcp"
            route = await grant_for(egress.client, url, session_id=SESSION, tenant="acme", ttl_s=60)
            async with open_upstream(_spec(url), server="notes", values={}, egress=route) as notes:
                assert len(await notes.list_tools()) == 4
    log: ConnectionLog = await request(
        egress.client,
        subjects.EGRESS_CONNECTIONS,
        ConnectionsRequest(grant_id=route.grant_id),
        ConnectionLog,
        timeout_s=10,
    )
    assert f"127.0.0.1:{port} allowed" in log.summary()


async def test_http_goes_through_an_egress_proxy_on_a_unix_socket_as_under_bastion_up(
    client: Client,
    run_service: ServiceRunner,
    nats_url: str,
    tmp_path: Path,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off_loopback = guard_network(monkeypatch)
    settings = EgressSettings(
        nats_url=nats_url,
        egress_allow_ranges="127.0.0.0/8",
        egress_listen=f"unix:{short_dir / 'egress.sock'}",
    )
    with anyio.fail_after(30):
        async with (
            run_service(egress_service(RESOLVER), settings),
            serving_http(NOTES, tmp_path, "--http") as port,
        ):
            url = f"http://127.0.0.1:{port}/mcp"
            route = await grant_for(client, url, session_id=SESSION, tenant="acme", ttl_s=60)
            async with open_upstream(_spec(url), server="notes", values={}, egress=route) as notes:
                listed = await notes.list_tools()
            log: ConnectionLog = await request(
                client,
                subjects.EGRESS_CONNECTIONS,
                ConnectionsRequest(grant_id=route.grant_id),
                ConnectionLog,
                timeout_s=10,
            )
    assert route.proxy.startswith("unix:")
    assert len(listed) == 4
    assert f"127.0.0.1:{port} allowed" in log.summary()
    assert off_loopback == []
