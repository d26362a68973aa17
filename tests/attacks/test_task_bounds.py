"""What an agent could try against the bounds and answers of background tasks: run more
process trees than its tenant's sandbox cap by starting tasks, get a secret past the task
log's cuts by pausing in the middle of it (or by printing a value stored after its task
started, then reading from inside it), be told a task did not start when it did, or was
stopped when it still runs, and start a task nobody can stop by cancelling its `bg_run`
or closing its session while the start waits for a sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
from bastion.proto.errors import ErrorReply
from bastion.proto.sandbox import SandboxRelease, SandboxReleased
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.tasks.log import TaskLog, read_page
from bastion.sandbox.tasks.store import TaskClaim, TaskStore
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError
from bastion.shared.redaction import Redactor
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.cancels import call_with_id, cancel
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session, tool
from tests.helpers.sleepers import processes_with
from tests.helpers.vault import add, key_file, vault_settings


@pytest.fixture
def plane_with(
    run_service: ServiceRunner, bus_settings: BusSettings, sandbox_state_dir: Path, tmp_path: Path
) -> Any:
    """`async with plane_with(sandbox={...}, orchestrator={...})`: vault, sandbox,
    orchestrator and policy on the test's NATS, the sandbox and orchestrator with these
    settings."""

    @asynccontextmanager
    async def running(
        sandbox: dict[str, Any] | None = None, orchestrator: dict[str, Any] | None = None
    ) -> AsyncIterator[None]:
        url = bus_settings.nats_url
        async with (
            run_service(vault_service, vault_settings(url, key_file(tmp_path / "vault"))),
            run_service(
                sandbox_service,
                SandboxSettings(nats_url=url, state_dir=str(sandbox_state_dir), **(sandbox or {})),
            ),
            run_service(
                orchestrator_service, OrchestratorSettings(nats_url=url, **(orchestrator or {}))
            ),
            run_service(policy_service, PolicySettings),
        ):
            yield

    return running


async def test_background_tasks_count_among_the_tenants_sandboxes(
    client: Client, plane_with: Any, workspace: Path
) -> None:
    """Each live task is a process tree with a command's limits: with the tenant's cap of
    two sandboxes held by two tasks, neither a command nor a third task runs beside them,
    and stopping one lets a command run."""
    async with plane_with(sandbox={"max_sandboxes_per_tenant": 2, "tenant_wait_s": 0}):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        first = await tool(client, sid, "bg_run", command="sleep 341")
        await tool(client, sid, "bg_run", command="sleep 342")
        command = await call(client, sid, "shell", command="echo ran")
        third = await call(client, sid, "bg_run", command="sleep 343")
        await tool(client, sid, "bg_stop", id=first["id"])
        after = await call(client, sid, "shell", command="echo ran")
        listed = await tool(client, sid, "bg_list")
    for refused in (command, third):
        assert isinstance(refused, ErrorReply) and refused.code == "unavailable", refused
        assert "2 sandboxes running, its cap" in refused.message
        assert "bg_stop" in refused.message
    assert isinstance(after, ToolOutput) and "ran" in after.text
    assert sorted(t["status"] for t in listed["tasks"]) == ["cancelled", "running"]


VALUE = "Zq8-task-log-secret-4471"


async def test_a_value_split_by_a_pause_in_a_tasks_output_is_cut_on_disk_and_in_every_page(
    client: Client, plane_with: Any, workspace: Path, sandbox_state_dir: Path
) -> None:
    """A task prints a value's first 9 characters, pauses, then the rest: the log must not
    decide the first half by the pause, so neither the file under the state dir nor any
    page of `bg_output` (read in small pages) holds the value, nor its halves side by side."""
    (workspace / "s.txt").write_text(VALUE)
    owned(workspace)
    async with plane_with():
        await add(client, "TOKEN", VALUE.encode())
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(
            client, sid, "bg_run", command="head -c 9 s.txt; sleep 1.5; tail -c +10 s.txt"
        )
        pages, offset = [], 0
        while True:
            got = await tool(client, sid, "bg_output", id=started["id"], offset=offset, limit=15)
            pages.append(got["text"])
            offset = got["next_offset"]
            if got["eof"]:
                break
            if not got["text"]:
                await anyio.sleep(0.05)
    on_disk = [p.read_text() for p in (sandbox_state_dir / "tasks").rglob("*.log")]
    shown = "".join(pages)
    assert on_disk == ["[secret TOKEN]"], on_disk
    assert shown == "[secret TOKEN]", pages
    assert VALUE[:9] not in shown and VALUE[9:] not in shown


async def test_a_reader_of_a_quiet_task_sees_its_held_text_only_once_decided_and_cut(
    client: Client, plane_with: Any, workspace: Path
) -> None:
    """A task prints a line and then the first half of a value, and goes quiet: a reader
    meanwhile is told text may be held back and is never shown the half; once the task
    ends, what was held is there, the value's half with it, cut of nothing it does not
    form."""
    async with plane_with():
        await add(client, "TOKEN", VALUE.encode())
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(
            client, sid, "bg_run", command=f"echo ready; printf %s {VALUE[:9]}; sleep 371"
        )
        while not processes_with("sleep 371"):  # noqa: ASYNC110 (a process, not an event)
            await anyio.sleep(0.05)
        while True:  # until something is shown, or the reader is told it is held back
            meanwhile = await tool(client, sid, "bg_output", id=started["id"])
            if meanwhile["text"] or meanwhile.get("note"):
                break
            await anyio.sleep(0.05)
        await tool(client, sid, "bg_stop", id=started["id"])
        after = await tool(client, sid, "bg_output", id=started["id"])
    assert VALUE[:9] not in meanwhile["text"]
    assert "held back" in meanwhile["note"]
    assert after["eof"] and after["text"].startswith(f"ready\n{VALUE[:9]}")
    assert "note" not in after


async def test_what_a_killed_sandbox_service_held_of_a_value_never_reaches_the_disk(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    sandbox_state_dir: Path,
    tmp_path: Path,
) -> None:
    """The service dies (kill -9) while its task's log holds a value's first half: what it
    held is lost, not written raw, and the service started again marks the task lost
    without writing it either."""
    url = bus_settings.nats_url
    env = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    env |= {"BASTION_NATS_URL": url, "BASTION_STATE_DIR": str(sandbox_state_dir)}
    async with (
        run_service(vault_service, vault_settings(url, key_file(tmp_path / "vault"))),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
        run_service(policy_service, PolicySettings),
    ):
        await add(client, "TOKEN", VALUE.encode())
        service = subprocess.Popen([sys.executable, "-m", "bastion.sandbox"], env=env)  # noqa: ASYNC220
        try:
            while True:
                try:
                    session = await open_session(
                        client, workspace=str(workspace), shell=True, autonomy="L3"
                    )
                    break
                except BastionError:  # the sandbox service is not up yet
                    await anyio.sleep(0.2)
            sid = session.session_id
            started = await tool(client, sid, "bg_run", command=f"printf %s {VALUE[:9]}; sleep 372")
            while True:  # until something is shown, or the reader is told it is held back
                got = await tool(client, sid, "bg_output", id=started["id"])
                if got["text"] or got.get("note"):
                    break
                await anyio.sleep(0.05)
        finally:
            service.send_signal(signal.SIGKILL)
            service.wait()
        settings = SandboxSettings(nats_url=url, state_dir=str(sandbox_state_dir))
        async with run_service(sandbox_service, settings):  # its sweep ends what was left
            listed = await tool(client, sid, "bg_list")
    logs = [p.read_text() for p in (sandbox_state_dir / "tasks").rglob("*.log")]
    assert VALUE[:9] not in got["text"]
    assert logs == [""]
    assert [t["status"] for t in listed["tasks"]] == ["lost"]
    assert processes_with("sleep 372") == []


async def test_a_bg_run_answered_late_is_answered_with_the_task_it_started_once(
    client: Client, plane_with: Any, workspace: Path
) -> None:
    """The tenant's one sandbox is held by a task for a while, so the next `bg_run` waits
    for it past the orchestrator's deadline for the sandbox's answer: that call must not be
    answered "uncertain" while its task starts anyway; asked again with its call id, the
    sandbox answers with the task it started, and starts no second one."""
    async with plane_with(
        sandbox={"max_sandboxes_per_tenant": 1}, orchestrator={"request_timeout_s": 2.5}
    ):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        await tool(client, sid, "bg_run", command="sleep 6")
        late = await call(client, sid, "bg_run", command="sleep 352")
        listed = await tool(client, sid, "bg_list")
    assert isinstance(late, ToolOutput), late
    started = json.loads(late.text)
    assert [t["command"] for t in listed["tasks"]] == ["sleep 352", "sleep 6"]
    assert listed["tasks"][0]["id"] == started["id"]


async def test_a_bg_stop_answered_late_says_what_happened_and_the_task_ends(
    client: Client, plane_with: Any, workspace: Path
) -> None:
    """A task that ignores SIGTERM takes its 3 s grace to stop, past the orchestrator's
    deadline: the stop is asked again, joins the one under way, and is answered with the
    task cancelled, its processes gone, rather than "uncertain"."""
    async with plane_with(orchestrator={"request_timeout_s": 2.0}):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(client, sid, "bg_run", command="trap '' TERM; sleep 353")
        while not processes_with("sleep 353"):  # noqa: ASYNC110 (a process, not an event)
            await anyio.sleep(0.05)
        stopped = await call(client, sid, "bg_stop", id=started["id"])
        left = processes_with("sleep 353")
    assert isinstance(stopped, ToolOutput), stopped
    assert json.loads(stopped.text)["status"] == "cancelled"
    assert left == []


async def test_a_stop_that_does_not_end_the_task_in_time_says_it_may_run_and_goes_on(
    client: Client, plane_with: Any, workspace: Path
) -> None:
    """`bg_stop` answers before the task has ended: it says the task may still run, and
    the stop goes on without anyone waiting on it until every process of it is gone."""
    async with plane_with(sandbox={"tasks_stop_wait_s": 0.5}):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(client, sid, "bg_run", command="trap '' TERM; sleep 354")
        while not processes_with("sleep 354"):  # noqa: ASYNC110 (a process, not an event)
            await anyio.sleep(0.05)
        stopped = await tool(client, sid, "bg_stop", id=started["id"])
        while processes_with("sleep 354"):  # noqa: ASYNC110 (a process, not an event)
            await anyio.sleep(0.1)
        while True:
            ended = (await tool(client, sid, "bg_list"))["tasks"][0]
            if ended["status"] != "stopping":
                break
            await anyio.sleep(0.1)
    assert stopped["status"] == "stopping" and "may still run" in stopped["note"], stopped
    assert ended["status"] == "cancelled" and ended["stopped_by"] == "model"


async def claim_of(store: TaskStore, sid: str, call_id: str, settled: bool) -> TaskClaim | None:
    """The call's claim on its start once it is there (`settled` False), or once its start
    is over (`settled`: gone, refused or started); polled, bounded."""
    for _ in range(600):
        found = await store.claimed("default", sid, call_id)
        if settled and (found is None or found.started or found.refused is not None):
            return found
        if not settled and found is not None:
            return found
        await anyio.sleep(0.05)
    raise AssertionError(f"the start of call {call_id} never {'ended' if settled else 'began'}")


async def test_a_bg_run_cancelled_while_it_waits_for_a_sandbox_never_starts_its_task(
    client: Client, plane_with: Any, workspace: Path
) -> None:
    """The tenant's one sandbox is held by a task, so a `bg_run` waits for it; the agent
    cancels that call: it is answered cancelled, and its start ends there: once the sandbox
    is free, no task of it starts (one would run in a session that may be closed by then,
    where nothing stops it)."""
    async with plane_with(sandbox={"max_sandboxes_per_tenant": 1, "tenant_wait_s": 120}):
        store = await TaskStore.open(client, subjects.SANDBOX_TASKS_BUCKET)
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        holder = await tool(client, sid, "bg_run", command="sleep 361")
        answers: list[Any] = []

        async def waiting() -> None:
            answers.append(await call_with_id(client, sid, "wait-1", "bg_run", command="sleep 362"))

        async with anyio.create_task_group() as group:
            group.start_soon(waiting)
            await claim_of(store, sid, "wait-1", settled=False)
            await cancel(client, sid, "wait-1", "mcp:attacker")
        ended = await claim_of(store, sid, "wait-1", settled=True)
        await tool(client, sid, "bg_stop", id=holder["id"])
        ran = await call(client, sid, "shell", command="echo ran")  # the sandbox is free
        listed = await tool(client, sid, "bg_list")
    assert isinstance(answers[0], ErrorReply) and answers[0].code == "cancelled", answers
    assert ended is None or not ended.started, ended
    assert isinstance(ran, ToolOutput) and "ran" in ran.text, ran
    assert [t["command"] for t in listed["tasks"]] == ["sleep 361"]
    assert processes_with("sleep 362") == []


async def test_a_bg_run_waiting_for_a_sandbox_when_its_session_closes_never_starts(
    client: Client, plane_with: Any, workspace: Path, sandbox_state_dir: Path
) -> None:
    """A `bg_run` of session B waits for the tenant's one sandbox, held by session A's
    task, and B's sandbox is released (its session closing: its token revoked, its client
    gone; a cancel of the call that never reached the sandbox): the start ends there, and
    once A's task is stopped, no task starts in closed B, and nothing of B is left under
    the state dir."""
    async with plane_with(sandbox={"max_sandboxes_per_tenant": 1, "tenant_wait_s": 120}):
        store = await TaskStore.open(client, subjects.SANDBOX_TASKS_BUCKET)
        a = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        b = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        holder = await tool(client, a.session_id, "bg_run", command="sleep 363")
        answers: list[Any] = []

        async def waiting() -> None:
            answers.append(
                await call_with_id(client, b.session_id, "wait-2", "bg_run", command="sleep 364")
            )

        async with anyio.create_task_group() as group:
            group.start_soon(waiting)
            await claim_of(store, b.session_id, "wait-2", settled=False)
            await request(
                client,
                subjects.SANDBOX_RELEASE,
                SandboxRelease(session_id=b.session_id, tenant="default"),
                SandboxReleased,
                timeout_s=30,
            )
        await request(
            client,
            subjects.SESSION_CLOSE,
            SessionRef(session_id=b.session_id),
            SessionInfo,
            timeout_s=30,
        )
        await tool(client, a.session_id, "bg_stop", id=holder["id"])
        ended = await claim_of(store, b.session_id, "wait-2", settled=True)
        ran = await call(client, a.session_id, "shell", command="echo ran")
        records = await store.of_session("default", b.session_id)
    assert isinstance(answers[0], ErrorReply), answers
    assert ended is None or not ended.started, ended
    assert isinstance(ran, ToolOutput) and "ran" in ran.text, ran
    assert [r.status for r in records if r.status in ("running", "stopping")] == []
    assert processes_with("sleep 364") == []
    assert not (sandbox_state_dir / "tasks" / b.session_id).exists()


LATE = "Kx7pW2mQ9vR4tY6nB3"


async def test_a_value_stored_after_its_task_started_is_never_written_raw(
    client: Client, plane_with: Any, workspace: Path, sandbox_state_dir: Path
) -> None:
    """A task starts when its tenant has no values; one is stored, then the task prints
    it: the log on disk holds it cut, and no page of `bg_output`, from whatever offset,
    shows any of it."""
    (workspace / "s.txt").write_text(LATE)
    owned(workspace)
    async with plane_with(sandbox={"redaction_refresh_s": 0}):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(
            client,
            sid,
            "bg_run",
            command="until [ -e go ]; do sleep 0.05; done; echo before; cat s.txt; echo; echo end",
        )
        await add(client, "LATE", LATE.encode())
        (workspace / "go").write_text("")
        while True:
            got = await tool(client, sid, "bg_output", id=started["id"])
            if got["eof"]:
                break
            await anyio.sleep(0.05)
        size = got["next_offset"]
        pages = [
            (await tool(client, sid, "bg_output", id=started["id"], offset=o, limit=6))["text"]
            for o in range(size)
        ]
    on_disk = [p.read_text() for p in (sandbox_state_dir / "tasks").rglob("*.log")]
    assert on_disk == ["before\n[secret LATE]\nend\n"], on_disk
    windows = {LATE[i : i + 4] for i in range(len(LATE) - 3)}
    assert not [page for page in pages if any(w in page for w in windows)], pages


def test_a_page_never_starts_inside_a_value_the_log_holds_raw(tmp_path: Path) -> None:
    """The log holds a value raw (written before it was known): a page read from any offset
    inside it shows its marker, never its rest, whatever the page's size; so reading from
    each offset recovers none of it."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 1 << 20, None)
    log.feed(f"ab {LATE} cd {LATE[::-1]} ef".encode())
    log.close()
    redactor = Redactor([("LATE", LATE)])
    windows = {LATE[i : i + 4] for i in range(len(LATE) - 3)}
    windows |= {w[::-1] for w in windows}
    for limit in (1, 4, 9, 64):
        for offset in range(path.stat().st_size):
            text, read, _ = read_page(path, offset, limit, redactor)
            assert read > 0
            assert not any(w in text for w in windows), (limit, offset, text)
    text, _, _ = read_page(path, 5, 64, redactor)
    assert text.startswith("[secret LATE] cd "), text


def test_a_value_split_across_a_change_of_the_logs_cuts_is_cut_whole(tmp_path: Path) -> None:
    """A task prints the first half of a value its log's cuts do not know yet (held back,
    as it could begin a known one); the value is stored, the log's cuts change, and the
    task prints the rest: what was held is carried over and cut with the new cuts, so the
    halves never reach the disk."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 1 << 20, Redactor([("OLD", "Old-value-known-before-7781")]))
    log.feed(f"x {LATE[:8]}".encode())
    log.recut(Redactor([("OLD", "Old-value-known-before-7781"), ("LATE", LATE)]))
    log.feed(f"{LATE[8:]} y".encode())
    log.close()
    assert path.read_text() == "x [secret LATE] y"
