"""Attempts to make the MCP front door hold memory for good: sessions that only
`initialize`, each with ~3.9 MB of params, opened and closed again and again; and more
sessions of one token than it may keep open, across replicas."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import httpx2
import msgspec

from bastion.mcp.frontdoor.opening import NAME_CHARS
from bastion.mcp.frontdoor.records import SessionRecords
from bastion.shared.bus import Client as Bus
from tests.helpers.bus import Plane
from tests.helpers.door_process import door_process, huge_initialize, rss_bytes
from tests.helpers.front_door import DoorOf, new_token

logger = logging.getLogger(__name__)

ACCEPT = "application/json, text/event-stream"
MIB = 1024 * 1024


async def _open_and_close(http: httpx2.AsyncClient, url: str, token: str, body: bytes) -> None:
    given = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    opened = await http.post(
        f"{url}/mcp", content=body, headers=given | {"Content-Type": "application/json"}
    )
    assert opened.status_code == 200, opened.text[:500]
    closed = await http.delete(
        f"{url}/mcp", headers=given | {"mcp-session-id": opened.headers["mcp-session-id"]}
    )
    assert closed.status_code == 200, closed.text[:500]


async def test_fifty_sessions_that_only_initialize_with_huge_params_give_their_memory_back(
    client: Bus, plane_of: Plane, nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    body = huge_initialize()
    assert 3_800_000 < len(body) < 4 * MIB
    small = huge_initialize(objects=1)
    async with (
        plane_of(),
        door_process(nats_url, tmp_path) as door,
        httpx2.AsyncClient(timeout=120) as http,
    ):
        token = await new_token(client, workspace, autonomy="L2")
        for _ in range(3):  # the first sessions' imports and caches, before the baseline
            await _open_and_close(http, door.url, token, small)
        before = rss_bytes(door.pid)
        for _ in range(50):
            await _open_and_close(http, door.url, token, body)
        after = rss_bytes(door.pid)
    logger.info("front door RSS: %d MiB before, %d MiB after", before // MIB, after // MIB)
    assert after - before < 50 * MIB, (before // MIB, after // MIB)


async def test_sessions_that_initialize_again_with_huge_params_give_their_memory_back(
    client: Bus, plane_of: Plane, nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    body = huge_initialize()
    small = huge_initialize(objects=1)
    async with (
        plane_of(),
        door_process(nats_url, tmp_path) as door,
        httpx2.AsyncClient(timeout=120) as http,
    ):
        token = await new_token(client, workspace, autonomy="L2")
        given = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
        for _ in range(3):
            await _open_and_close(http, door.url, token, small)
        before = rss_bytes(door.pid)
        for _ in range(20):
            opened = await http.post(
                f"{door.url}/mcp",
                content=small,
                headers=given | {"Content-Type": "application/json"},
            )
            session = {"mcp-session-id": opened.headers["mcp-session-id"]}
            again = await http.post(
                f"{door.url}/mcp",
                content=body,
                headers=given | session | {"Content-Type": "application/json"},
            )
            assert again.status_code < 500, again.text[:500]
            closed = await http.delete(f"{door.url}/mcp", headers=given | session)
            assert closed.status_code == 200, closed.text[:500]
        after = rss_bytes(door.pid)
    logger.info("front door RSS: %d MiB before, %d MiB after", before // MIB, after // MIB)
    assert after - before < 50 * MIB, (before // MIB, after // MIB)


async def test_calls_with_huge_arguments_are_not_held_after_their_answer(
    client: Bus, plane_of: Plane, nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    many = b",".join([b"{}"] * 1_300_000)
    call = b'{"name":"read_file","arguments":{"path":"a.txt","x":[%s]}}' % many
    async with (
        plane_of(),
        door_process(nats_url, tmp_path) as door,
        httpx2.AsyncClient(timeout=120) as http,
    ):
        token = await new_token(client, workspace, autonomy="L2")
        given = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
        given |= {"Content-Type": "application/json", "mcp-protocol-version": "2025-11-25"}
        opened = await http.post(
            f"{door.url}/mcp", content=huge_initialize(objects=1), headers=given
        )
        given["mcp-session-id"] = opened.headers["mcp-session-id"]
        told = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        assert (await http.post(f"{door.url}/mcp", content=told, headers=given)).status_code == 202

        async def called(request_id: int) -> None:
            body = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}' % (
                request_id,
                call,
            )
            answer = await http.post(f"{door.url}/mcp", content=body, headers=given)
            assert answer.status_code == 200, answer.text[:500]
            assert "read_file takes: path, offset, limit" in answer.text, answer.text[:500]

        for request_id in range(4):  # the allocator's high-water mark of such calls, first
            await called(request_id)
        before = rss_bytes(door.pid)
        for request_id in range(4, 12):
            await called(request_id)
        after = rss_bytes(door.pid)
    logger.info("front door RSS: %d MiB before, %d MiB after", before // MIB, after // MIB)
    assert after - before < 50 * MIB, (before // MIB, after // MIB)


async def test_an_initialize_keeps_only_what_bastion_reads_of_its_params(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    body = huge_initialize().replace(b'"name":"hoarder"', b'"name":"' + b"h" * 100_000 + b'"')
    records = await SessionRecords.open(client)
    async with plane_of(), door_of() as url, httpx2.AsyncClient(timeout=60) as http:
        token = await new_token(client, workspace, autonomy="L2")
        given = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
        opened = await http.post(
            f"{url}/mcp", content=body, headers=given | {"Content-Type": "application/json"}
        )
        assert opened.status_code == 200, opened.text[:500]
        with anyio.fail_after(30):  # written once the answer is sent
            while (record := await records.get(opened.headers["mcp-session-id"])) is None:  # noqa: ASYNC110 (a KV key, no event)
                await anyio.sleep(0.05)
    kept = msgspec.json.decode(record.client_params_json)
    assert kept == {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "h" * NAME_CHARS, "version": "1"},
    }


async def test_an_initialize_whose_params_have_another_shape_is_refused_before_the_sdk(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url, httpx2.AsyncClient(timeout=60) as http:
        token = await new_token(client, workspace, autonomy="L2")
        given = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
        refused = await http.post(
            f"{url}/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 7,
                "method": "initialize",
                "params": {"capabilities": []},
            },
            headers=given,
        )
        fine = await http.post(
            f"{url}/mcp",
            content=huge_initialize(objects=1),
            headers=given | {"Content-Type": "application/json"},
        )
        # a string the SDK's lax parse would take as a boolean, and with it the rest whole
        lax = huge_initialize().replace(b'"elicitation":{}', b'"roots":{"listChanged":"true"}')
        again = await http.post(
            f"{url}/mcp",
            content=lax,
            headers=given
            | {
                "Content-Type": "application/json",
                "mcp-session-id": fine.headers["mcp-session-id"],
            },
        )
    assert refused.status_code == 400
    assert refused.json()["id"] == 7
    assert "capabilities" in refused.json()["error"]["message"]
    assert fine.status_code == 200
    assert again.status_code == 400
    assert "listChanged" in again.json()["error"]["message"]


async def test_one_token_cannot_open_more_sessions_than_its_cap_across_replicas(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with (
        plane_of(),
        door_of() as first,
        door_of() as second,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        token = await new_token(client, workspace, autonomy="L2")
        given = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
        small = huge_initialize(objects=1)
        answers = [
            await http.post(
                f"{url}/mcp", content=small, headers=given | {"Content-Type": "application/json"}
            )
            for url in [first, second] * 17
        ]
    assert [a.status_code for a in answers] == [200] * 32 + [429, 429]
    refusal = answers[-1].json()
    assert refusal["id"] == 1
    assert refusal["error"]["data"] == {"code": "quota_exceeded"}
    assert "32 MCP sessions open or opening" in refusal["error"]["message"]
    assert "DELETE" in refusal["error"]["message"]
