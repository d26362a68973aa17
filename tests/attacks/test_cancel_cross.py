"""Cancelling what is not one's own must do nothing: an MCP client naming another client's
request id, or a cancel sent in one session naming another session's call id, leaves that
call running; only its own client's cancel stops it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp_types import CancelledNotification, CancelledNotificationParams

from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import CallResult
from bastion.shared.bus import Client
from tests.helpers.bus import Plane
from tests.helpers.cancels import call_with_id, cancel, gone, until
from tests.helpers.front_door import DoorOf, mcp_client, new_token
from tests.helpers.session import open_session
from tests.helpers.sleepers import sleeping, unique_duration

pytestmark = pytest.mark.anyio


async def test_an_mcp_client_cannot_cancel_another_clients_call(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    duration = unique_duration()
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token) as victim, mcp_client(url, token) as attacker:
            async with anyio.create_task_group() as group:

                async def sleeper() -> None:
                    await victim.call_tool("shell", {"command": f"sleep {duration}"})

                group.start_soon(sleeper)
                await until(lambda: bool(sleeping(duration)), "the sleep started")
                for request_id in range(32):  # whatever id the victim's call has
                    await attacker.session.send_notification(
                        CancelledNotification(
                            params=CancelledNotificationParams(request_id=request_id)
                        )
                    )
                await attacker.list_tools()  # a round trip after the notifications
                await anyio.sleep(0.5)  # and time for a cancel, had one been sent
                assert sleeping(duration), "another client's notifications cancelled the call"
                group.cancel_scope.cancel()  # its own client's cancel does
            await gone(lambda: sleeping(duration))


async def test_a_cancel_in_one_session_does_not_reach_another_sessions_call(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    duration = unique_duration()
    async with plane_of():
        victim = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        other = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        results: list[CallResult] = []

        async def sleeper() -> None:
            results.append(
                await call_with_id(
                    client, victim.session_id, "shared-id", "shell", command=f"sleep {duration}"
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(sleeper)
            await until(lambda: bool(sleeping(duration)), "the sleep started")
            answer = await cancel(client, other.session_id, "shared-id", "mcp:attacker")
            assert answer.outcome == "unknown", answer.message
            await anyio.sleep(0.5)
            assert sleeping(duration), "a cancel in another session stopped the call"
            mine = await cancel(client, victim.session_id, "shared-id", "cli:owner")
        assert mine.outcome == "cancelled"
        [result] = results
        assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED
        assert "cli:owner" in result.message
        await gone(lambda: sleeping(duration))
