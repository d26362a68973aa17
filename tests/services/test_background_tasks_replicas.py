"""Background tasks across two sandbox replicas on one NATS, each with a state dir of its own
(as pods have): a request landing on the replica that does not run the task is forwarded to
the one that does, a session's close ends its tasks on both, and a task of a killed replica
is `lost` with a sentence saying so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, SandboxRelease, SandboxReleased
from bastion.proto.tasks import (
    TaskList,
    TaskListing,
    TaskOutput,
    TaskRead,
    TaskRecord,
    TaskStart,
    TaskStarted,
    TaskStop,
    TaskView,
)
from bastion.proto.toolinput import BgOutputInput, BgStopInput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.tasks.holders import Holders
from bastion.sandbox.tasks.runner import KEPT_ENDED, STOP_TAKES_S, TaskLimits, Tasks
from bastion.sandbox.tasks.store import TaskStore, new_task_id
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError, NotFound
from bastion.shared.sandboxing.warm import marker
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.session import open_session, tool
from tests.helpers.sleepers import processes_with

SESSION = "00000000000000b1"


async def ask(replica: Service, endpoint: str, message: Any) -> Any:
    """`endpoint` of this replica itself, whatever replica the queue group would pick."""
    handler = replica.endpoints[endpoint].handler
    return await handler(message, RequestContext(replica.endpoints[endpoint].subject, {}))


async def start(replica: Service, workspace: Path, command: str) -> TaskStarted:
    exec_request = ExecRequest(session_id=SESSION, workspace=str(workspace), command=command)
    started: TaskStarted = await ask(replica, "task_start", TaskStart(exec=exec_request))
    return started


def read(task_id: str, offset: int = 0) -> TaskRead:
    return TaskRead(session_id=SESSION, input=BgOutputInput(id=task_id, offset=offset))


def stop(task_id: str) -> TaskStop:
    return TaskStop(session_id=SESSION, input=BgStopInput(id=task_id))


async def listed(replica: Service) -> dict[str, TaskView]:
    listing: TaskListing = await ask(replica, "task_list", TaskList(session_id=SESSION))
    return {task.id: task for task in listing.tasks}


async def output_until(replica: Service, task_id: str, word: str) -> str:
    """The task's output read through `replica` until it holds `word` (the log fills as the
    task prints: the test waits on the output, not on a clock)."""
    text = ""
    with anyio.fail_after(30):
        while word not in text:
            got: TaskOutput = await ask(replica, "task_output", read(task_id, len(text.encode())))
            text += got.text
            if word not in text:
                await anyio.sleep(0.05)
    return text


@asynccontextmanager
async def replicas(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> AsyncIterator[tuple[Service, Service]]:
    """Sandbox replicas A and B, each with a state dir of its own."""

    def settings(name: str) -> SandboxSettings:
        return SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / name))

    async with (
        run_service(sandbox_service, settings("state-a")) as a,
        run_service(sandbox_service, settings("state-b")) as b,
    ):
        yield a, b


async def test_output_and_stop_sent_to_the_other_replica_read_and_stop_the_task(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path, workspace: Path
) -> None:
    async with replicas(run_service, bus_settings, tmp_path) as (a, b):
        started = await start(a, workspace, "echo from-replica-a; sleep 321")
        through_b = await output_until(b, started.id, "from-replica-a")
        stopped: TaskView = await ask(b, "task_stop", stop(started.id))
        after: TaskOutput = await ask(b, "task_output", read(started.id))
        left = processes_with("sleep 321")
    assert through_b == "from-replica-a\n"
    assert stopped.status == "cancelled" and stopped.stopped_by == "model"
    assert after.eof and after.status == "cancelled"
    assert after.text.startswith("from-replica-a\n")  # then the shell's "Terminated"
    assert left == []


def reads(replica: Service) -> int:
    """How many `bg_output` requests `replica` has answered from the queue group."""
    return replica.endpoints["task_output"].requests


async def test_through_the_orchestrator_every_bg_output_reads_the_text_whichever_replica_gets_it(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    workspace: Path,
) -> None:
    """Reads go to either replica (a queue group): they are sent until both have answered
    some, and every one has the text; then a bg_stop and a session close, wherever they
    land, leave the task cancelled and its processes gone."""
    orchestrator = OrchestratorSettings(nats_url=bus_settings.nats_url)
    async with (
        replicas(run_service, bus_settings, tmp_path) as (a, b),
        run_service(orchestrator_service, orchestrator),
        run_service(policy_service, PolicySettings),
    ):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(client, sid, "bg_run", command="echo both-see-this; sleep 325")
        texts: list[str] = []
        with anyio.fail_after(60):
            while not texts or "both-see-this" not in texts[-1]:
                texts = [(await tool(client, sid, "bg_output", id=started["id"]))["text"]]
                await anyio.sleep(0.05)
            before = reads(a), reads(b)
            while reads(a) == before[0] or reads(b) == before[1]:
                texts.append((await tool(client, sid, "bg_output", id=started["id"]))["text"])
        stopped = await tool(client, sid, "bg_stop", id=started["id"])
        left = processes_with("sleep 325")
    assert set(texts) == {"both-see-this\n"}
    assert stopped["status"] == "cancelled" and stopped["stopped_by"] == "model"
    assert left == []


async def test_a_session_close_on_one_replica_ends_the_tasks_both_run(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path, workspace: Path
) -> None:
    async with replicas(run_service, bus_settings, tmp_path) as (a, b):
        on_a = await start(a, workspace, "sleep 322")
        on_b = await start(b, workspace, "sleep 323")
        with anyio.fail_after(30):
            while not (processes_with("sleep 322") and processes_with("sleep 323")):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        await ask(a, "release", SandboxRelease(session_id=SESSION))
        tasks = await listed(b)
        left = processes_with("sleep 322") + processes_with("sleep 323")
    assert {tasks[on_a.id].status, tasks[on_b.id].status} == {"cancelled"}
    assert {tasks[on_a.id].stopped_by, tasks[on_b.id].stopped_by} == {"session_closed"}
    assert left == []


async def test_a_task_of_a_killed_replica_is_lost_with_a_sentence_saying_so(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    workspace: Path,
) -> None:
    state_b = tmp_path / "state-b"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    env |= {"BASTION_NATS_URL": bus_settings.nats_url, "BASTION_STATE_DIR": str(state_b)}
    b = subprocess.Popen([sys.executable, "-m", "bastion.sandbox"], env=env)  # noqa: ASYNC220
    try:
        begin = TaskStart(
            exec=ExecRequest(session_id=SESSION, workspace=str(workspace), command="sleep 324")
        )
        started: TaskStarted | None = None
        with anyio.fail_after(60):
            while started is None:
                try:
                    started = await request(
                        client, subjects.SANDBOX_TASK_START, begin, TaskStarted, timeout_s=5
                    )
                except BastionError:  # not up yet
                    await anyio.sleep(0.2)
            while not processes_with("sleep 324"):  # noqa: ASYNC110 (a process, not an event)
                await anyio.sleep(0.05)
        settings_a = SandboxSettings(
            nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state-a")
        )
        async with run_service(sandbox_service, settings_a) as a:
            alive = await listed(a)
            b.send_signal(signal.SIGKILL)
            b.wait()
            with pytest.raises(NotFound) as refused:
                await ask(a, "task_output", read(started.id))
            after = await listed(a)
            stopped: TaskView = await ask(a, "task_stop", stop(started.id))
    finally:
        if b.poll() is None:
            b.send_signal(signal.SIGKILL)
            b.wait()
    settings_b = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(state_b))
    async with run_service(sandbox_service, settings_b):  # B restarted: its sweep ends them
        await request(
            client,
            subjects.SANDBOX_RELEASE,
            SandboxRelease(session_id=SESSION),
            SandboxReleased,
            timeout_s=10,
        )
    assert alive[started.id].status == "running"
    assert "replica that is gone" in refused.value.message
    assert "marked lost" in refused.value.message and "bg_run" in refused.value.message
    assert after[started.id].status == "lost" and after[started.id].error == "replica_gone"
    assert stopped.status == "lost"
    assert processes_with("sleep 324") == []


async def unheard(_record: TaskRecord) -> None:
    """Told of a task's end: nobody listens here."""


async def test_a_restart_on_a_shared_state_dir_marks_lost_only_the_tasks_no_replica_answers_for(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """What a restarted replica's sweep marks `lost` (`Tasks.mark_lost`, here without the
    sweep of sandboxes before it): of the tasks of its state dir, those of a replica that is
    gone, never those of a sibling on the same state dir that still runs them."""
    state = tmp_path / "state-shared"
    settings = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(state))
    store = await TaskStore.open(client, settings.tasks_bucket)
    orphan = TaskRecord(
        id=new_task_id(),
        session_id=SESSION,
        tenant="default",
        owner=marker(state.resolve()),
        replica="0123456789abcdef",  # no replica of this id runs
        command="sleep 326",
        timeout_ms=60_000,
        started_at=time.time(),
    )
    async with run_service(sandbox_service, settings) as sibling:
        running = await start(sibling, workspace, "sleep 327")
        await store.admit(orphan, per_session=4, per_tenant=16)  # after the sibling's sweep
        restarted = Tasks(
            store,
            state.resolve(),
            marker(state.resolve()),
            TaskLimits(),
            ended=unheard,
            holders=Holders(client, timeout_s=10, stop_s=STOP_TAKES_S),
        )
        marked = await restarted.mark_lost()
        tasks = await listed(sibling)
    assert marked == 1
    assert tasks[orphan.id].status == "lost" and tasks[orphan.id].error == "replica_gone"
    assert tasks[running.id].status == "running"  # the sibling answers for it: not lost


async def test_a_session_close_removes_the_log_of_an_ended_task_another_replica_forgot(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path, workspace: Path
) -> None:
    """A task ran (and ended) on B; then A ran `KEPT_ENDED` more, past what the session
    keeps: A must not forget B's record while B still holds its log (A cannot remove it),
    or the session's close, which reaches the replicas its records name, leaves that log on
    B's disk."""
    async with replicas(run_service, bus_settings, tmp_path) as (a, b):
        first = await start(b, workspace, "echo on-b")
        await output_until(b, first.id, "on-b")
        for _ in range(KEPT_ENDED):
            started = await start(a, workspace, "true")
            with anyio.fail_after(30):
                while (await listed(a))[started.id].status == "running":  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        await ask(a, "release", SandboxRelease(session_id=SESSION))
    assert not (tmp_path / "state-b" / "tasks" / SESSION).exists()
    assert not (tmp_path / "state-a" / "tasks" / SESSION).exists()
