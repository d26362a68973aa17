"""Attempts on the MCP front door that must fail: another agent's MCP session or transcript,
a token where it is not read, a tool outside the token's profile, malformed and oversized
bodies — each refused with a status or JSON-RPC error, and the door still serving after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from bastion.shared.bus import Client as Bus
from tests.helpers.bus import Plane
from tests.helpers.front_door import DoorOf, mcp_client, new_token, text_of

ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "attacker", "version": "1"},
    },
}


def headers(token: str, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": ACCEPT, **more}


async def opened(http: httpx2.AsyncClient, url: str, token: str) -> str:
    """A legacy MCP session opened with `token`: its id."""
    answer = await http.post(f"{url}/mcp", json=INITIALIZE, headers=headers(token))
    assert answer.status_code == 200, answer.text
    return answer.headers["mcp-session-id"]


async def test_another_agents_mcp_session_is_not_found_for_this_token(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url, httpx2.AsyncClient(timeout=30) as http:
        alice = await new_token(client, workspace, agent="alice", autonomy="L3")
        mallory = await new_token(client, workspace, agent="mallory", autonomy="L3")
        session = await opened(http, url, alice)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        stolen = await http.post(
            f"{url}/mcp",
            json=listing,
            headers=headers(
                mallory, **{"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
            ),
        )
        deleted = await http.delete(
            f"{url}/mcp", headers=headers(mallory, **{"mcp-session-id": session})
        )
        still = await http.post(
            f"{url}/mcp",
            json=listing,
            headers=headers(
                alice, **{"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
            ),
        )
    assert stolen.status_code == 404
    assert deleted.status_code == 404
    assert still.status_code == 200


async def test_another_agents_transcript_is_not_readable(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        alice = await new_token(client, workspace, agent="alice", autonomy="L3")
        mallory = await new_token(client, workspace, agent="mallory", autonomy="L3")
        async with mcp_client(url, alice) as mcp:
            await mcp.call_tool("write_file", {"path": "a.txt", "content": "alice's\n"})
            read = await mcp.read_resource("bastion://sessions")
        [contents] = read.contents
        session_id = contents.text.split('"session_id":"', 1)[1][:16]  # type: ignore[union-attr]
        async with mcp_client(url, mallory) as mcp:
            with pytest.raises(MCPError) as refused:
                await mcp.read_resource(f"bastion://sessions/{session_id}")
    assert "alice" not in str(refused.value.error.message)


@pytest.mark.parametrize(
    "where",
    [
        {"params": {"access_token": "TOKEN"}},
        {"headers": {"Authorization": "Basic TOKEN"}},
        {"headers": {"Authorization": "Bearer"}},
        {"headers": {"Authorization": "Bearer TOKEN-but-longer"}},
    ],
    ids=["query", "basic", "empty", "altered"],
)
async def test_a_token_anywhere_but_an_exact_bearer_header_opens_nothing(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, where: dict[str, Any]
) -> None:
    async with plane_of(), door_of() as url, httpx2.AsyncClient(timeout=30) as http:
        token = await new_token(client, workspace, autonomy="L3")
        request: dict[str, Any] = {
            key: {k: v.replace("TOKEN", token) for k, v in value.items()}
            for key, value in where.items()
        }
        request.setdefault("headers", {})["Accept"] = ACCEPT
        answer = await http.post(f"{url}/mcp", json=INITIALIZE, **request)
    assert answer.status_code == 401
    assert "bastion token create" in answer.text


async def test_a_tool_outside_the_tokens_profile_is_not_there(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L6")  # no --shell
        async with mcp_client(url, token) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            with pytest.raises(MCPError) as refused:
                await mcp.call_tool("shell", {"command": "id"})
    assert "shell" not in names
    assert refused.value.error.code == -32602


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', 400),
        (b"[" + b'"x",' * (5 * 1024 * 1024) + b'"x"]', 413),
    ],
    ids=["malformed", "not-a-request", "oversized"],
)
async def test_malformed_and_oversized_bodies_are_refused_and_the_door_keeps_serving(
    client: Bus,
    plane_of: Plane,
    door_of: DoorOf,
    workspace: Path,
    body: bytes,
    status: int,
) -> None:
    async with plane_of(), door_of() as url, httpx2.AsyncClient(timeout=60) as http:
        token = await new_token(client, workspace, autonomy="L3")
        answer = await http.post(
            f"{url}/mcp",
            content=body,
            headers=headers(token, **{"Content-Type": "application/json"}),
        )
        async with mcp_client(url, token) as mcp:
            wrote = await mcp.call_tool("write_file", {"path": "ok.txt", "content": "ok\n"})
    assert answer.status_code == status, answer.text[:300]
    assert "wrote" in text_of(wrote)
