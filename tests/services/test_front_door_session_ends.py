"""A session ended on one front door replica (its DELETE, its idle end) is ended on every
replica: another replica's copy of it (adopted there) is not served on, and holds no memory
without its slot — checked at each request, and let go of when the slots are renewed; a
session whose slot a stopping replica gave back is still served by the others."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2

from bastion.mcp.frontdoor.slots import SessionSlots
from bastion.mcp.frontdoor.tokens import hash_of
from bastion.shared.bus import Client as Bus
from tests.helpers.bus import Plane
from tests.helpers.door_process import huge_initialize
from tests.helpers.front_door import DoorOf, new_token

ACCEPT = "application/json, text/event-stream"
VERSION = "2025-11-25"
PING = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'


class Agent:
    """One token's raw HTTP requests to the front doors."""

    def __init__(self, http: httpx2.AsyncClient, token: str) -> None:
        self._http = http
        self.headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}

    def of(self, session: str) -> dict[str, str]:
        return self.headers | {"mcp-session-id": session, "mcp-protocol-version": VERSION}

    async def open(self, url: str) -> httpx2.Response:
        return await self._http.post(
            f"{url}/mcp",
            content=huge_initialize(objects=1),
            headers=self.headers | {"Content-Type": "application/json"},
        )

    async def ping(self, url: str, session: str) -> int:
        answer = await self._http.post(
            f"{url}/mcp",
            content=PING,
            headers=self.of(session) | {"Content-Type": "application/json"},
        )
        return answer.status_code

    async def delete(self, url: str, session: str) -> int:
        return (await self._http.delete(f"{url}/mcp", headers=self.of(session))).status_code


async def test_a_session_deleted_on_one_replica_is_not_served_by_the_one_that_adopted_it(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    cap = {"mcp_max_sessions_per_token": 2}
    async with (
        plane_of(),
        door_of(**cap) as first,
        door_of(**cap) as second,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        agent = Agent(http, await new_token(client, workspace, autonomy="L2"))
        opened = [(await agent.open(first)).headers["mcp-session-id"] for _ in range(2)]
        adopted = [await agent.ping(second, session) for session in opened]
        deleted = [await agent.delete(first, session) for session in opened]
        after = [await agent.ping(second, session) for session in opened]
        # the slots given back are all there are: the cap still counts every session served
        again = [(await agent.open(url)).status_code for url in (second, first, second)]
    assert adopted == [200, 200]
    assert deleted == [200, 200]
    assert after == [404, 404]
    assert again == [200, 200, 429]


async def test_a_replica_that_stops_does_not_end_a_session_another_replica_serves(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with (
        plane_of(),
        door_of() as second,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        agent = Agent(http, await new_token(client, workspace, autonomy="L2"))
        async with door_of() as first:
            session = (await agent.open(first)).headers["mcp-session-id"]
            adopted = await agent.ping(second, session)
        # the first gave its sessions' slots back as it stopped: the session is still open
        after_stop = [await agent.ping(second, session) for _ in range(2)]
        deleted = await agent.delete(second, session)
    assert adopted == 200
    assert after_stop == [200, 200]
    assert deleted == 200


async def test_a_replica_lets_go_of_its_copy_of_a_session_ended_elsewhere_unasked(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    # slots renewed every second: the copy is let go of at a renewal, with no request to it
    cap = {"mcp_session_slot_s": 3.0}
    async with (
        plane_of(),
        door_of(**cap) as first,
        door_of(**cap) as second,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        agent = Agent(http, await new_token(client, workspace, autonomy="L2"))
        session = (await agent.open(first)).headers["mcp-session-id"]
        assert await agent.ping(second, session) == 200
        # the client's standing stream on the second replica: it ends when the copy does
        async with http.stream("GET", f"{second}/mcp", headers=agent.of(session)) as standing:
            assert standing.status_code == 200
            assert await agent.delete(first, session) == 200
            with anyio.fail_after(30):
                async for _ in standing.aiter_bytes():
                    pass


async def test_renewing_the_slots_names_the_sessions_that_hold_none(
    client: Bus, plane_of: Plane
) -> None:
    async with plane_of():
        slots = await SessionSlots.open(client, limit=4, slot_s=60.0)
        token = hash_of("bst_renewing")
        for session in ("a" * 32, "b" * 32):
            await slots.take(token, session)
        await slots.give_back(token, "b" * 32)
        gone = await slots.renew({"a" * 32: token, "b" * 32: token, "c" * 32: hash_of("bst_x")})
        holds = [await slots.holds(token, s) for s in ("a" * 32, "b" * 32)]
    assert gone == {"b" * 32, "c" * 32}
    assert holds == [True, False]
