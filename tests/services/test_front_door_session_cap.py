"""The cap of MCP sessions per agent token (`BASTION_MCP_MAX_SESSIONS_PER_TOKEN`), counted
across front door replicas: refused past it, and each slot given back when its session ends
— DELETE on any replica, idle end, a replica that stops or dies."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from bastion.mcp.frontdoor.tokens import hash_of
from bastion.proto import subjects
from bastion.proto.frontdoor import McpSessionSlots
from bastion.shared.bus import Client as Bus
from bastion.shared.kv import TypedBucket
from tests.helpers.bus import Plane
from tests.helpers.door_process import door_process, huge_initialize
from tests.helpers.front_door import DoorOf, mcp_client, new_token

ACCEPT = "application/json, text/event-stream"
OPENING = huge_initialize(objects=1)


class Opener:
    """Opens and closes one token's MCP sessions over plain HTTP."""

    def __init__(self, http: httpx2.AsyncClient, token: str) -> None:
        self._http = http
        self._headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}

    async def open(self, url: str) -> httpx2.Response:
        return await self._http.post(
            f"{url}/mcp",
            content=OPENING,
            headers=self._headers | {"Content-Type": "application/json"},
        )

    async def opened(self, url: str) -> str:
        answer = await self.open(url)
        assert answer.status_code == 200, answer.text
        return answer.headers["mcp-session-id"]

    async def delete(self, url: str, session: str) -> int:
        answer = await self._http.delete(
            f"{url}/mcp", headers=self._headers | {"mcp-session-id": session}
        )
        return answer.status_code

    async def reopened(self, url: str) -> str:
        """A session opened as soon as a slot is free again (polled: slots lapse in time)."""
        with anyio.fail_after(60):
            while (answer := await self.open(url)).status_code == 429:  # noqa: ASYNC110 (a slot lapses in time)
                await anyio.sleep(0.2)
        assert answer.status_code == 200, answer.text
        return answer.headers["mcp-session-id"]


async def test_the_cap_counts_both_replicas_and_a_delete_on_either_gives_a_slot_back(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    cap = {"mcp_max_sessions_per_token": 3}
    async with (
        plane_of(),
        door_of(**cap) as first,
        door_of(**cap) as second,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        token = await new_token(client, workspace, autonomy="L2")
        other = Opener(http, await new_token(client, workspace, agent="other", autonomy="L2"))
        agent = Opener(http, token)
        a = await agent.opened(first)
        await agent.opened(second)
        await agent.opened(first)
        past_cap = [(await agent.open(url)).status_code for url in (first, second)]
        others = await other.opened(second)  # another token has slots of its own
        deleted = await agent.delete(second, a)  # opened on the first, adopted and ended here
        after_delete = (await agent.open(first)).status_code
        full_again = (await agent.open(second)).status_code
    assert past_cap == [429, 429]
    assert others
    assert deleted == 200
    assert after_delete == 200
    assert full_again == 429


async def test_a_served_session_s_slot_is_renewed_and_keeps_counting(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    bucket = await TypedBucket.open(client, subjects.FRONTDOOR_SLOTS_BUCKET, McpSessionSlots)
    cap = {"mcp_max_sessions_per_token": 1, "mcp_session_slot_s": 3.0}
    async with plane_of(), door_of(**cap) as url, httpx2.AsyncClient(timeout=60) as http:
        token = await new_token(client, workspace, autonomy="L2")
        agent = Opener(http, token)
        session = await agent.opened(url)
        key = hash_of(token)
        first = (await bucket.get(key)).value.held[session]
        with anyio.fail_after(60):
            while (renewed := (await bucket.get(key)).value.held[session]) == first:  # noqa: ASYNC110 (a KV record)
                await anyio.sleep(0.2)
        with anyio.fail_after(60):  # past the first lapse, the slot still counts
            while datetime.now(UTC) <= first:  # noqa: ASYNC110 (the clock)
                await anyio.sleep(0.2)
        past_first_lapse = (await agent.open(url)).status_code
    assert renewed > first
    assert past_first_lapse == 429


async def test_a_session_that_ends_idle_gives_its_slot_back(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    # slots that would outlive the test: only the idle end's give-back frees one
    settings = {
        "mcp_max_sessions_per_token": 1,
        "mcp_session_idle_s": 1.0,
        "mcp_session_slot_s": 3600.0,
    }
    async with (
        plane_of(),
        door_of(**settings) as url,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        agent = Opener(http, await new_token(client, workspace, autonomy="L2"))
        first = await agent.opened(url)
        second = await agent.reopened(url)
    assert second != first


async def test_the_slots_of_a_replica_that_died_lapse_and_the_token_opens_again(
    client: Bus, plane_of: Plane, nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    settings = {"BASTION_MCP_MAX_SESSIONS_PER_TOKEN": "2", "BASTION_MCP_SESSION_SLOT_S": "3"}
    async with (
        plane_of(),
        door_process(nats_url, tmp_path, **settings) as survivor,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        agent = Opener(http, await new_token(client, workspace, autonomy="L2"))
        async with door_process(nats_url, tmp_path, **settings) as doomed:
            await agent.opened(doomed.url)
            await agent.opened(doomed.url)
            full = (await agent.open(survivor.url)).status_code
            os.kill(doomed.pid, signal.SIGKILL)
        await agent.reopened(survivor.url)
    assert full == 429


async def test_a_replica_that_stops_gives_its_sessions_slots_back(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    cap = {"mcp_max_sessions_per_token": 1, "mcp_session_slot_s": 3600.0}
    async with plane_of(), door_of(**cap) as survivor, httpx2.AsyncClient(timeout=60) as http:
        agent = Opener(http, await new_token(client, workspace, autonomy="L2"))
        async with door_of(**cap) as stopping:
            await agent.opened(stopping)
            full = (await agent.open(survivor)).status_code
        after_stop = (await agent.open(survivor)).status_code
    assert full == 429
    assert after_stop == 200


async def test_the_sdk_client_past_the_cap_is_told_how_many_are_open_and_what_to_do(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of(mcp_max_sessions_per_token=1) as url:
        token = await new_token(client, workspace, autonomy="L2")
        told = pytest.RaisesExc(
            MCPError,
            match=r"already has 1 MCP sessions open or opening.*"
            r"BASTION_MCP_MAX_SESSIONS_PER_TOKEN=1\): close sessions .* DELETE",
        )
        async with mcp_client(url, token):
            with pytest.RaisesGroup(told, flatten_subgroups=True):
                async with mcp_client(url, token):
                    pass
        async with mcp_client(url, token) as again:  # the first's DELETE gave its slot back
            tools = await again.list_tools()
    assert tools.tools
