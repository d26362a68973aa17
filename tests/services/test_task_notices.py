"""A front-door client told, on its standing stream, that its session's background tasks
ended on their own: the official MCP SDK's client, a real front door, orchestrator and
sandbox service, the tasks in the session's bubblewrap sandbox."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
from mcp import Client
from mcp_types import LoggingMessageNotificationParams
from nats.aio.msg import Msg

from bastion.mcp.frontdoor.taskends import LOGGER
from bastion.proto import subjects
from bastion.proto.events import TaskEnded
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request
from bastion.shared.codec import decode
from tests.helpers.bus import Plane
from tests.helpers.front_door import DoorOf, mcp_client, new_token, text_of
from tests.helpers.session import call, open_session

QUICK = {"mcp_task_end_gather_s": 2.0, "mcp_task_end_every_s": 0.5}
"""Ends within 2 s share a message (as by default); a session may be told again half a
second later, so a test's next end is told soon."""


@dataclass
class Told:
    """The log notifications one client was sent."""

    messages: list[LoggingMessageNotificationParams] = field(default_factory=list)
    came: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, params: LoggingMessageNotificationParams) -> None:
        self.messages.append(params)
        self.came.set()
        self.came = anyio.Event()

    async def until(self, count: int) -> None:
        """Wait until `count` messages came (the test waits on them, not on a clock)."""
        with anyio.fail_after(60):
            while len(self.messages) < count:
                await self.came.wait()

    def tasks(self, index: int) -> list[dict[str, Any]]:
        """The tasks message `index` names."""
        data: dict[str, Any] = self.messages[index].data
        return list(data["tasks"])


async def tool(mcp: Client, name: str, **given: Any) -> Any:
    return json.loads(text_of(await mcp.call_tool(name, given)))


async def waiting_task(mcp: Client, go: str, label: str, code: int = 0) -> str:
    """A task that ends with `code` once the file `go` is in the workspace; its id."""
    command = f"while [ ! -e {go} ]; do sleep 0.1; done; exit {code}"
    started = await tool(mcp, "bg_run", command=command, label=label)
    return str(started["id"])


def go(workspace: Path, *names: str) -> None:
    for name in names:
        (workspace / name).touch()
        os.chown(workspace / name, 1000, 1000)


async def until_ended(mcp: Client, task_id: str) -> dict[str, Any]:
    while True:
        listed: list[dict[str, Any]] = (await tool(mcp, "bg_list"))["tasks"]
        [found] = [t for t in listed if t["id"] == task_id]
        if found["status"] not in ("running", "stopping"):
            return found
        await anyio.sleep(0.1)


async def token_of(client: Bus, workspace: Path) -> str:
    return await new_token(client, workspace, autonomy="L3", shell=True)


async def test_a_task_ending_on_its_own_yields_one_log_notification_naming_it(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    told = Told()
    async with (
        plane_of(),
        door_of(**QUICK) as url,
        mcp_client(url, await token_of(client, workspace), log=told) as mcp,
    ):
        failing = await waiting_task(mcp, "go-1", "the build", code=3)
        go(workspace, "go-1")
        await told.until(1)
        # A later end, told after it: the first task was told once, alone.
        later = await waiting_task(mcp, "go-2", "the tests")
        go(workspace, "go-2")
        await told.until(2)
    first = told.messages[0]
    assert first.level == "info" and first.logger == LOGGER
    assert told.tasks(0) == [
        {
            "id": failing,
            "label": "the build",
            "status": "failed",
            "exit_code": 3,
            "error": "exit_status",
            "read": f"bg_output id={failing}",
        }
    ]
    assert f"read it with bg_output id={failing}" in first.data["text"]
    assert "failed with exit code 3" in first.data["text"]
    assert [t["id"] for t in told.tasks(1)] == [later]
    assert told.tasks(1)[0]["status"] == "succeeded"
    assert len(told.messages) == 2


async def test_two_tasks_ending_together_share_one_message(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    told = Told()
    async with (
        plane_of(),
        door_of(**QUICK) as url,
        mcp_client(url, await token_of(client, workspace), log=told) as mcp,
    ):
        one = await waiting_task(mcp, "go", "one")
        two = await waiting_task(mcp, "go", "two", code=1)
        go(workspace, "go")
        await told.until(1)
        sentinel = await waiting_task(mcp, "go-last", "last")
        go(workspace, "go-last")
        await told.until(2)
    assert {t["id"] for t in told.tasks(0)} == {one, two}
    assert [t["id"] for t in told.tasks(1)] == [sentinel]
    assert len(told.messages) == 2


async def test_ends_while_a_session_must_stay_quiet_wait_for_the_next_message_and_none_is_lost(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    told = Told()
    quiet = {"mcp_task_end_gather_s": 0.2, "mcp_task_end_every_s": 10.0}
    async with (
        plane_of(),
        door_of(**quiet) as url,
        mcp_client(url, await token_of(client, workspace), log=told) as mcp,
    ):
        first = await waiting_task(mcp, "go-1", "first")
        second = await waiting_task(mcp, "go-2", "second")
        third = await waiting_task(mcp, "go-3", "third")
        go(workspace, "go-1")
        await told.until(1)
        go(workspace, "go-2")
        await until_ended(mcp, second)
        await anyio.sleep(0.4)  # past the gathering: only the quiet holds it back
        go(workspace, "go-3")
        await until_ended(mcp, third)
        await told.until(2)
    assert [t["id"] for t in told.tasks(0)] == [first]
    assert {t["id"] for t in told.tasks(1)} == {second, third}
    assert len(told.messages) == 2


async def test_a_task_stopped_with_bg_stop_is_not_told(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    told = Told()
    async with (
        plane_of(),
        door_of(**QUICK) as url,
        mcp_client(url, await token_of(client, workspace), log=told) as mcp,
    ):
        stopped = await waiting_task(mcp, "never", "stopped")
        view = await tool(mcp, "bg_stop", id=stopped)
        sentinel = await waiting_task(mcp, "go", "sentinel")
        go(workspace, "go")
        await told.until(1)
    assert view["status"] == "cancelled" and view["stopped_by"] == "model"
    assert [t["id"] for t in told.tasks(0)] == [sentinel]
    assert len(told.messages) == 1


async def test_another_sessions_client_is_told_nothing_of_a_task_it_did_not_run(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    """Neither another agent's client nor another MCP session of the same token."""
    mine, theirs, same_token = Told(), Told(), Told()
    async with plane_of(), door_of(**QUICK) as url:
        token = await token_of(client, workspace)
        async with (
            mcp_client(url, token, log=mine) as me,
            mcp_client(url, await token_of(client, workspace), log=theirs) as them,
            mcp_client(url, token, log=same_token) as my_other_session,
        ):
            await them.list_tools()
            await my_other_session.list_tools()
            task = await waiting_task(me, "go-mine", "mine")
            go(workspace, "go-mine")
            await mine.until(1)
            their_task = await waiting_task(them, "go-theirs", "theirs")
            other_task = await waiting_task(my_other_session, "go-theirs", "same token")
            go(workspace, "go-theirs")
            await theirs.until(1)
            await same_token.until(1)
    assert [t["id"] for t in mine.tasks(0)] == [task]
    assert [t["id"] for t in theirs.tasks(0)] == [their_task]
    assert [t["id"] for t in same_token.tasks(0)] == [other_task]
    assert [len(told.messages) for told in (mine, theirs, same_token)] == [1, 1, 1]


async def bus_tool(client: Bus, session_id: str, name: str, **given: Any) -> Any:
    result = await call(client, session_id, name, **given)
    assert isinstance(result, ToolOutput), result
    return json.loads(result.text)


async def test_the_sandbox_tells_a_timeouts_end_without_output_and_nothing_of_a_closed_sessions(
    client: Bus, plane_of: Plane, workspace: Path
) -> None:
    heard: list[TaskEnded] = []
    came = anyio.Event()

    async def keep(message: Msg) -> None:
        heard.append(decode(message.data, TaskEnded))
        came.set()

    subscription = await client.subscribe(subjects.event("task_ended", "default"), cb=keep)
    async with plane_of():
        closing = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        await bus_tool(client, closing.session_id, "bg_run", command="sleep 300")
        await request(
            client,
            subjects.SESSION_CLOSE,
            SessionRef(session_id=closing.session_id),
            SessionInfo,
            timeout_s=30,
        )
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        timed = await bus_tool(
            client,
            session.session_id,
            "bg_run",
            command="echo secret-output; sleep 300",
            label="slow",
            timeout_ms=1000,
        )
        with anyio.fail_after(60):
            await came.wait()
    await subscription.unsubscribe()
    [ended] = heard
    assert (ended.session_id, ended.task_id, ended.label) == (
        session.session_id,
        timed["id"],
        "slow",
    )
    assert (ended.status, ended.error, ended.tenant) == ("failed", "timeout", "default")
    assert "secret-output" not in json.dumps(msgspec.to_builtins(ended))
