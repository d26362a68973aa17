"""Background tasks (`bg_run`, `bg_list`, `bg_output`, `bg_stop`) through the orchestrator
and a real sandbox service, in the session's warm bubblewrap sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.sandbox import ExecRequest, SandboxRelease, SandboxReleased
from bastion.proto.tasks import TaskList, TaskListing, TaskRecord, TaskStart, TaskStarted
from bastion.proto.tools import CallParked
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.tasks.runner import _ended
from bastion.sandbox.tasks.store import TaskStore, new_task_id
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.front_door import DoorOf, mcp_client, new_token, text_of
from tests.helpers.mcp_upstream import free_port
from tests.helpers.session import call, open_session, tool
from tests.helpers.sleepers import processes_with

TENANT = "default"


async def until_ended(client: Client, session_id: str, task_id: str) -> dict[str, Any]:
    """The task once it has ended (polled: the test waits on the task, not on a clock)."""
    while True:
        listed: list[dict[str, Any]] = (await tool(client, session_id, "bg_list"))["tasks"]
        [found] = [t for t in listed if t["id"] == task_id]
        if found["status"] not in ("running", "stopping"):
            return found
        await anyio.sleep(0.1)


async def whole_output(client: Client, session_id: str, task_id: str, limit: int) -> str:
    """The task's output read by offsets until eof, checking no stretch is read twice."""
    offset, text = 0, ""
    while True:
        got = await tool(client, session_id, "bg_output", id=task_id, offset=offset, limit=limit)
        assert got["next_offset"] >= offset
        text += str(got["text"])
        offset = got["next_offset"]
        if got["eof"]:
            return text
        if not got["text"]:
            await anyio.sleep(0.05)


async def test_output_is_read_by_offsets_without_repeats_and_eof_only_once_it_ended(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        started = await tool(
            client,
            session.session_id,
            "bg_run",
            command="for i in $(seq 1 200); do echo line $i; done; echo err >&2",
            label="count",
        )
        assert started["status"] == "running" and started["label"] == "count"
        assert started["timeout_ms"] == 3600 * 1000 and "bg_output" in started["note"]
        text = await whole_output(client, session.session_id, started["id"], limit=100)
        ended = await until_ended(client, session.session_id, started["id"])
        again = await tool(
            client, session.session_id, "bg_output", id=started["id"], offset=len(text.encode())
        )
    expected = "".join(f"line {i}\n" for i in range(1, 201)) + "err\n"
    assert text == expected
    assert ended["status"] == "succeeded" and ended["exit_code"] == 0
    assert ended["output_bytes"] == len(expected)
    assert again["eof"] is True and again["text"] == ""


async def test_a_long_output_keeps_its_head_a_marker_line_and_its_last_32_kib(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    plane_of: Plane,
    workspace: Path,
    sandbox_state_dir: Path,
) -> None:
    del plane_of
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(sandbox_state_dir),
        tasks_max_output_bytes=4096,
    )

    async with (
        run_service(sandbox_service, settings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        run_service(policy_service, PolicySettings),
    ):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        started = await tool(
            client,
            session.session_id,
            "bg_run",
            command="seq 1 100000; echo the-last-line",
        )
        text = await whole_output(client, session.session_id, started["id"], limit=65536)
        got = await tool(client, session.session_id, "bg_output", id=started["id"])
    head, marker, tail = text.partition("[bastion: the output went past 4096 bytes")
    everything = "".join(f"{i}\n" for i in range(1, 100001)) + "the-last-line\n"
    assert marker and everything.startswith(head.removesuffix("\n"))
    assert len(head.encode()) <= 4097
    tail = tail.partition("\n")[2]
    assert tail.endswith("99999\n100000\nthe-last-line\n")
    assert len(tail.encode()) == 32 * 1024 and everything.endswith(tail)
    assert got["output_truncated"] is True


async def test_a_task_past_its_time_is_stopped_and_ends_failed_with_timeout(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        started = await tool(
            client, session.session_id, "bg_run", command="echo begun; sleep 300", timeout_ms=1000
        )
        ended = await until_ended(client, session.session_id, started["id"])
    assert ended["status"] == "failed" and ended["error"] == "timeout"
    assert ended["stopped_by"] == "timeout"


async def test_bg_stop_ends_a_task_cancelled_stopped_by_the_model_and_its_processes_gone(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        started = await tool(
            client, session.session_id, "bg_run", command="sleep 311 & sleep 312; wait"
        )
        while not processes_with("sleep 312"):  # noqa: ASYNC110 (a process, not an event)
            await anyio.sleep(0.05)
        stopped = await tool(client, session.session_id, "bg_stop", id=started["id"])
        again = await tool(client, session.session_id, "bg_stop", id=started["id"])
        left = processes_with("sleep 311") + processes_with("sleep 312")
    assert stopped["status"] == "cancelled" and stopped["stopped_by"] == "model"
    assert again == stopped  # a terminal state is never left
    assert left == []


async def test_a_fifth_live_task_of_a_session_is_refused_with_a_sentence(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        for _ in range(4):
            await tool(client, session.session_id, "bg_run", command="sleep 300")
        fifth = await call(client, session.session_id, "bg_run", command="sleep 300")
        listed = await tool(client, session.session_id, "bg_list")
    assert isinstance(fifth, ErrorReply) and fifth.code == "unavailable"
    assert "BASTION_TASKS_MAX_PER_SESSION=4" in fifth.message and "bg_stop" in fifth.message
    assert [t["status"] for t in listed["tasks"]] == ["running"] * 4


async def test_a_stop_racing_the_exit_ends_in_exactly_one_state(client: Client) -> None:
    store = await TaskStore.open(client, subjects.SANDBOX_TASKS_BUCKET)
    outcomes = set()
    for _ in range(20):
        record = TaskRecord(
            id=new_task_id(),
            session_id="0123456789abcdef",
            tenant=TENANT,
            owner="test",
            command="true",
            timeout_ms=1000,
            started_at=0.0,
        )
        await store.admit(record, per_session=4, per_tenant=16)

        def stopping(current: TaskRecord) -> TaskRecord | None:
            if current.status != "running":
                return None
            return msgspec.structs.replace(current, status="stopping", stopped_by="model")

        async with anyio.create_task_group() as group:
            group.start_soon(store.change, record, stopping)
            group.start_soon(store.change, record, lambda r: _ended(r, 0, 0))
        first = await store.get(TENANT, record.session_id, record.id)
        if first.status == "stopping":  # the stop came first: the exit then ends it cancelled
            await store.change(record, lambda r: _ended(r, 0, 0))
        final = await store.get(TENANT, record.session_id, record.id)
        assert final.status in ("succeeded", "cancelled")
        assert (final.status == "cancelled") == (final.stopped_by == "model")
        assert await store.change(record, stopping) is None  # never left
        assert await store.change(record, lambda r: _ended(r, 1, 0)) is None
        outcomes.add(final.status)
    live = await store.of_session(TENANT, "0123456789abcdef")
    assert all(r.status in ("succeeded", "cancelled") for r in live)
    # every ended task stopped being counted: four more can start
    for _ in range(4):
        spare = TaskRecord(
            id=new_task_id(),
            session_id="0123456789abcdef",
            tenant=TENANT,
            owner="test",
            command="true",
            timeout_ms=1000,
            started_at=0.0,
        )
        await store.admit(spare, per_session=4, per_tenant=16)


async def test_a_dev_server_started_with_bg_run_answers_a_later_shell_curl_at_the_front_door(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    port = free_port()
    (workspace / "index.html").write_text("hello from the dev server\n")
    os.chown(workspace / "index.html", 1000, 1000)
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token) as mcp:
            listed = {t.name for t in (await mcp.list_tools()).tools}
            started = json.loads(
                text_of(
                    await mcp.call_tool(
                        "bg_run",
                        {
                            "command": f"python3 -m http.server {port} --bind 127.0.0.1",
                            "label": "dev server",
                        },
                    )
                )
            )
            curled = ""
            while "hello from the dev server" not in curled:
                curled = text_of(
                    await mcp.call_tool(
                        "shell",
                        {"command": f"curl -s http://127.0.0.1:{port}/index.html || sleep 0.2"},
                    )
                )
            first = json.loads(
                text_of(await mcp.call_tool("bg_output", {"id": started["id"], "offset": 0}))
            )
            while "GET /index.html" not in first["text"]:
                first = json.loads(
                    text_of(await mcp.call_tool("bg_output", {"id": started["id"], "offset": 0}))
                )
            rest = json.loads(
                text_of(
                    await mcp.call_tool(
                        "bg_output", {"id": started["id"], "offset": first["next_offset"]}
                    )
                )
            )
            stopped = json.loads(text_of(await mcp.call_tool("bg_stop", {"id": started["id"]})))
            left = processes_with(f"http.server {port}")
    assert {"bg_run", "bg_list", "bg_output", "bg_stop"} <= listed
    assert "GET /index.html" not in rest["text"]  # nothing read twice
    assert rest["next_offset"] >= first["next_offset"]
    assert stopped["status"] == "cancelled" and stopped["stopped_by"] == "model"
    assert left == []


async def test_a_session_without_a_shell_is_not_offered_background_tasks(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        refused = await call(client, session.session_id, "bg_list")
    assert not any(t.name.startswith("bg_") for t in session.tools)
    assert isinstance(refused, ErrorReply)


async def test_a_task_of_a_killed_sandbox_service_is_marked_lost_at_the_next_start(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    sandbox_state_dir: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    env |= {"BASTION_NATS_URL": bus_settings.nats_url, "BASTION_STATE_DIR": str(sandbox_state_dir)}
    service = subprocess.Popen([sys.executable, "-m", "bastion.sandbox"], env=env)  # noqa: ASYNC220
    try:
        session_id = "00000000000000aa"
        start = TaskStart(
            exec=ExecRequest(session_id=session_id, workspace=str(workspace), command="sleep 313")
        )
        started: TaskStarted | None = None
        while started is None:
            try:
                started = await request(
                    client, subjects.SANDBOX_TASK_START, start, TaskStarted, timeout_s=5
                )
            except BastionError:  # not up yet
                await anyio.sleep(0.2)
        while not processes_with("sleep 313"):  # noqa: ASYNC110 (a process, not an event)
            await anyio.sleep(0.05)
    finally:
        service.send_signal(signal.SIGKILL)
        service.wait()
    settings = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(sandbox_state_dir))
    async with run_service(sandbox_service, settings):
        listing = await request(
            client,
            subjects.SANDBOX_TASK_LIST,
            TaskList(session_id=session_id),
            TaskListing,
            timeout_s=10,
        )
        await request(
            client,
            subjects.SANDBOX_RELEASE,
            SandboxRelease(session_id=session_id),
            SandboxReleased,
            timeout_s=10,
        )
    [task] = listing.tasks
    assert task.id == started.id and task.status == "lost"
    assert processes_with("sleep 313") == []


@pytest.fixture
def sandbox_state_dir(tmp_path: Path) -> Path:
    """A state dir of its own per test (so a killed service's sweep finds its sandboxes)."""
    return tmp_path / "sandbox-state"


async def test_the_four_tools_ask_where_shell_asks_by_the_same_rule(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    asked = []
    async with plane_of():
        for name, given in (
            ("shell", {"command": "echo hi"}),
            ("bg_run", {"command": "echo hi"}),
            ("bg_list", {}),
            ("bg_stop", {"id": new_task_id()}),
        ):
            session = await open_session(
                client, workspace=str(workspace), shell=True, autonomy="L2"
            )
            asked.append(await call(client, session.session_id, name, **given))
    parked = [each for each in asked if isinstance(each, CallParked)]
    assert len(parked) == 4, asked
    assert len({each.decision.rule for each in parked}) == 1


async def test_a_start_sent_again_with_its_call_id_is_answered_alike_and_made_once(
    client: Client, plane: None, workspace: Path
) -> None:
    """`sandbox.task_start` sent twice with one call id starts one task, both answered with
    it; a refused one (the session at its cap) is refused alike when sent again, and its
    call id starts nothing then either."""
    del plane
    session_id = "00000000000000ab"

    def start(call_id: str, command: str) -> TaskStart:
        return TaskStart(
            exec=ExecRequest(
                session_id=session_id, workspace=str(workspace), command=command, call_id=call_id
            )
        )

    first = await request(
        client, subjects.SANDBOX_TASK_START, start("c-1", "sleep 361"), TaskStarted, timeout_s=30
    )
    again = await request(
        client, subjects.SANDBOX_TASK_START, start("c-1", "sleep 361"), TaskStarted, timeout_s=30
    )
    for n in range(3):  # the session's cap of 4 live tasks
        await request(
            client,
            subjects.SANDBOX_TASK_START,
            start(f"c-{n + 2}", "sleep 362"),
            TaskStarted,
            timeout_s=30,
        )
    refusals = []
    for _ in range(2):
        with pytest.raises(BastionError) as refused:
            await request(
                client, subjects.SANDBOX_TASK_START, start("c-9", "true"), TaskStarted, timeout_s=30
            )
        refusals.append((refused.value.code, refused.value.message))
    listing = await request(
        client,
        subjects.SANDBOX_TASK_LIST,
        TaskList(session_id=session_id),
        TaskListing,
        timeout_s=10,
    )
    await request(
        client,
        subjects.SANDBOX_RELEASE,
        SandboxRelease(session_id=session_id),
        SandboxReleased,
        timeout_s=30,
    )
    assert again.id == first.id and "not started again" in again.note
    assert [t.command for t in listing.tasks].count("sleep 361") == 1
    assert len(listing.tasks) == 4
    assert refusals[0] == refusals[1] and "BASTION_TASKS_MAX_PER_SESSION" in refusals[0][1]


async def test_a_bg_run_never_answered_in_time_says_its_task_may_have_started(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    sandbox_state_dir: Path,
) -> None:
    """With no time to ask again (`BASTION_TASKS_ASK_S` 0), a start that waits past the
    deadline for the tenant's one sandbox is `uncertain`, and says the task may have
    started and where to look; it does start, once."""
    url = bus_settings.nats_url
    sandbox = SandboxSettings(
        nats_url=url, state_dir=str(sandbox_state_dir), max_sandboxes_per_tenant=1
    )
    orchestrator = OrchestratorSettings(nats_url=url, request_timeout_s=2.0, tasks_ask_s=0)
    async with (
        run_service(sandbox_service, sandbox),
        run_service(orchestrator_service, orchestrator),
        run_service(policy_service, PolicySettings),
    ):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        await tool(client, sid, "bg_run", command="sleep 5")
        late = await call(client, sid, "bg_run", command="sleep 363")
        while True:
            listed = (await tool(client, sid, "bg_list"))["tasks"]
            if len(listed) == 2:
                break
            await anyio.sleep(0.1)
    assert isinstance(late, ErrorReply) and late.code == "uncertain", late
    assert "may have started" in late.message and "bg_list" in late.message
    assert [t["command"] for t in listed] == ["sleep 363", "sleep 5"]
