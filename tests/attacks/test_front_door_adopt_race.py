"""Attempts to catch a session half adopted: many first requests of a session at once on a
replica that did not open it (each could find the session registered there before its
transport was connected, which the SDK answered 500: `No read stream writer available`)."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2

from bastion.shared.bus import Client as Bus
from tests.helpers.bus import Plane
from tests.helpers.door_process import huge_initialize
from tests.helpers.front_door import DoorOf, new_token

ACCEPT = "application/json, text/event-stream"
SESSIONS = 6
AT_ONCE = 8


async def test_first_requests_of_a_session_at_once_on_another_replica_are_all_served(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with (
        plane_of(),
        door_of() as first,
        door_of() as second,
        httpx2.AsyncClient(timeout=60) as http,
    ):
        token = await new_token(client, workspace, autonomy="L2")
        given = {
            "Authorization": f"Bearer {token}",
            "Accept": ACCEPT,
            "Content-Type": "application/json",
        }
        statuses: list[int] = []
        for _ in range(SESSIONS):
            opened = await http.post(
                f"{first}/mcp", content=huge_initialize(objects=1), headers=given
            )
            assert opened.status_code == 200, opened.text[:500]
            session = given | {
                "mcp-session-id": opened.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }

            async def ping(request_id: int, session: dict[str, str] = session) -> None:
                body = b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % request_id
                answer = await http.post(f"{second}/mcp", content=body, headers=session)
                statuses.append(answer.status_code)

            async with anyio.create_task_group() as group:
                for request_id in range(AT_ONCE):
                    group.start_soon(ping, request_id + 2)
    assert statuses == [200] * SESSIONS * AT_ONCE
