"""Background tasks (`bg_run`, `bg_output`, `bg_stop`) in a Docker session, through the
sandbox service on the bus: each task an exec of its reaper in the session's container."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, ExecResult, Limits
from bastion.proto.tasks import (
    BgOutputInput,
    BgStopInput,
    TaskList,
    TaskListing,
    TaskOutput,
    TaskRead,
    TaskStart,
    TaskStarted,
    TaskStop,
    TaskView,
)
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from tests.helpers.bus import ServiceRunner
from tests.helpers.docker import containers_of, release
from tests.helpers.owners import OWNER_GID, OWNER_UID, owned

SESSION = "0123456789abcdef"


def _exec(workspace: Path, backend: str, command: str) -> ExecRequest:
    return ExecRequest(
        session_id=SESSION,
        workspace=str(workspace),
        command=command,
        backend=backend,
        network="none",
    )


async def shell(client: Client, workspace: Path, backend: str, command: str) -> ExecResult:
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, _exec(workspace, backend, command), ExecResult, timeout_s=60
    )
    return result


async def bg_run(
    client: Client, workspace: Path, backend: str, command: str, cwd: str = ""
) -> TaskStarted:
    start = TaskStart(exec=_exec(workspace, backend, command), cwd=cwd)
    started: TaskStarted = await request(
        client, subjects.SANDBOX_TASK_START, start, TaskStarted, timeout_s=60
    )
    return started


async def bg_output(
    client: Client, task_id: str, offset: int = 0, limit: int = 65536
) -> TaskOutput:
    read = TaskRead(session_id=SESSION, input=BgOutputInput(id=task_id, offset=offset, limit=limit))
    output: TaskOutput = await request(
        client, subjects.SANDBOX_TASK_OUTPUT, read, TaskOutput, timeout_s=30
    )
    return output


async def bg_stop(client: Client, task_id: str) -> TaskView:
    stop = TaskStop(session_id=SESSION, input=BgStopInput(id=task_id))
    view: TaskView = await request(client, subjects.SANDBOX_TASK_STOP, stop, TaskView, timeout_s=60)
    return view


async def until_ended(client: Client, task_id: str) -> TaskView:
    """The task once it has ended (polled: the test waits on the task, not on a clock)."""
    while True:
        listing = await request(
            client,
            subjects.SANDBOX_TASK_LIST,
            TaskList(session_id=SESSION),
            TaskListing,
            timeout_s=30,
        )
        [found] = [t for t in listing.tasks if t.id == task_id]
        if found.status not in ("running", "stopping"):
            return found
        await anyio.sleep(0.1)


async def until_said(client: Client, task_id: str, word: str) -> str:
    """The task's output once it holds `word`."""
    while True:
        text = (await bg_output(client, task_id)).text
        if word in text:
            return text
        await anyio.sleep(0.05)


async def until_running(engine: Any, owner: str, words: list[str]) -> None:
    """Once each of `words` is in a command line of the session's container."""
    while True:
        lines = commands_in(engine, owner)
        if all(any(word in line for line in lines) for word in words):
            return
        await anyio.sleep(0.05)


def commands_in(engine: Any, owner: str) -> list[str]:
    """The command lines of every process of the session's container (`docker top`)."""
    [container] = containers_of(engine, owner, SESSION)
    top = container.top(ps_args="-eo pid,args")
    return [" ".join(process) for process in top["Processes"]]


async def test_a_task_runs_in_the_sessions_container_and_is_read_by_offsets(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    owned(workspace / "sub")
    await shell(client, workspace, backend_name, "echo kept > /tmp/kept")
    started = await bg_run(
        client,
        workspace,
        backend_name,
        "pwd; cat /tmp/kept; for i in $(seq 1 200); do echo line $i; done; echo err >&2",
        cwd="sub",
    )
    offset, text = 0, ""
    while True:
        got = await bg_output(client, started.id, offset=offset, limit=100)
        assert got.next_offset >= offset
        text += got.text
        offset = got.next_offset
        if got.eof:
            break
        if not got.text:
            await anyio.sleep(0.05)
    ended = await until_ended(client, started.id)
    expected = "/workspace/sub\nkept\n" + "".join(f"line {i}\n" for i in range(1, 201)) + "err\n"
    assert text == expected
    assert (ended.status, ended.exit_code, ended.output_bytes) == ("succeeded", 0, len(expected))
    assert len(containers_of(engine, owner, SESSION)) == 1


def _repository(workspace: Path) -> None:
    """The workspace made a repository by its owner."""
    subprocess.run(["git", "-c", "safe.directory=*", "init", "-q"], cwd=workspace, check=True)
    for path in [workspace, *workspace.rglob("*")]:
        os.lchown(path, 1000, 1000)


async def test_a_task_in_a_repository_is_refused_saying_why(
    client: Client, sandbox: None, workspace: Path, backend_name: str
) -> None:
    """A task runs past the sweep of `.git` that ends each command, and a container cannot
    show `.git` read-only to one exec: in a repository a Docker session gets no task."""
    _repository(workspace)
    with pytest.raises(RemoteError) as refused:
        await bg_run(client, workspace, backend_name, "echo ../ev > .git/commondir")
    assert refused.value.code == codes.NOT_IMPLEMENTED
    assert "no repository" in refused.value.message
    assert not (workspace / ".git" / "commondir").exists()


async def test_a_failing_task_ends_failed_with_its_status(
    client: Client, sandbox: None, workspace: Path, backend_name: str
) -> None:
    started = await bg_run(client, workspace, backend_name, "exit 3")
    ended = await until_ended(client, started.id)
    assert (ended.status, ended.exit_code, ended.error) == ("failed", 3, "exit_status")


async def test_bg_stop_leaves_no_process_of_it_and_spares_the_sessions_others(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    await shell(client, workspace, backend_name, "nohup sleep 3061 >/dev/null 2>&1 &")
    started = await bg_run(
        client, workspace, backend_name, "sleep 3062 & sleep 3063 & echo up; wait"
    )
    await until_said(client, started.id, "up")
    assert any("sleep 3063" in line for line in commands_in(engine, owner))
    stopped = await bg_stop(client, started.id)
    left = commands_in(engine, owner)
    assert stopped.status == "cancelled" and stopped.stopped_by == "model"
    assert not [line for line in left if "sleep 306" in line and "3061" not in line]
    assert any("sleep 3061" in line for line in left)  # not the task's: still runs


async def test_a_task_that_left_its_session_and_ignored_sigterm_still_dies(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    command = (
        "trap '' TERM; "
        "setsid sh -c 'trap \"\" TERM; sleep 3071' & "  # a session of its own
        "(setsid sh -c 'sleep 3072 & exit 0' &); "  # double-forked: an orphan at once
        "nohup sleep 3073 >/dev/null 2>&1 & "
        "echo up; while :; do sleep 1; done"
    )
    await shell(client, workspace, backend_name, "nohup sleep 3070 >/dev/null 2>&1 &")
    started = await bg_run(client, workspace, backend_name, command)
    await until_said(client, started.id, "up")
    await until_running(engine, owner, ["sleep 3071", "sleep 3072", "sleep 3073"])
    stopped = await bg_stop(client, started.id)
    left = commands_in(engine, owner)
    assert stopped.status == "cancelled"
    assert not [line for line in left if "sleep 307" in line and "3070" not in line], left
    assert not [line for line in left if "reaper" in line], left
    assert any("sleep 3070" in line for line in left)  # the reaper's kill, not `kill -9 -1`


async def test_what_a_task_leaves_dies_when_its_command_ends(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    started = await bg_run(client, workspace, backend_name, "(sleep 3081 &); echo done")
    ended = await until_ended(client, started.id)
    assert (ended.status, ended.exit_code) == ("succeeded", 0)
    assert not [line for line in commands_in(engine, owner) if "sleep 3081" in line]


async def test_a_dev_server_task_answers_a_later_shell_command(
    client: Client, sandbox: None, workspace: Path, backend_name: str
) -> None:
    page = workspace / "hello.txt"
    page.write_text("served from the task\n")
    os.chown(page, OWNER_UID, OWNER_GID)
    started = await bg_run(
        client, workspace, backend_name, "exec python3 -m http.server 8765 --bind 127.0.0.1"
    )
    fetch = workspace / "fetch.py"
    fetch.write_text(
        "import time, urllib.request\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        page = urllib.request.urlopen('http://127.0.0.1:8765/hello.txt')\n"
        "        print(page.read().decode(), end='')\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
    )
    os.chown(fetch, OWNER_UID, OWNER_GID)
    answered = await shell(client, workspace, backend_name, "python3 fetch.py")
    stopped = await bg_stop(client, started.id)
    assert answered.stdout == "served from the task\n", answered.stderr
    assert stopped.status == "cancelled"


async def test_a_removed_container_ends_its_tasks_failed(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    started = await bg_run(client, workspace, backend_name, "echo up; sleep 3091")
    await until_said(client, started.id, "up")
    [container] = containers_of(engine, owner, SESSION)
    container.remove(force=True)
    ended = await until_ended(client, started.id)
    assert (ended.status, ended.error) == ("failed", "sandbox_ended")


async def test_a_task_that_killed_its_reaper_ends_failed_and_what_it_left_dies(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    command = "kill -9 $PPID; setsid sleep 3101 & echo up; sleep 3102"
    started = await bg_run(client, workspace, backend_name, command)
    ended = await until_ended(client, started.id)
    left = commands_in(engine, owner)
    assert (ended.status, ended.exit_code) == ("failed", 137)
    assert not [line for line in left if "sleep 310" in line], left


def _with_libraries(program: str) -> list[Path]:
    """A host program and the shared libraries it loads (`ldd`), for an image of its own."""
    found = shutil.which(program)
    assert found is not None, f"the host has no {program}"
    listed = subprocess.run(["ldd", found], capture_output=True, text=True, check=True).stdout
    return [Path(found), *(Path(p) for p in re.findall(r"(/\S+) \(0x", listed))]


@pytest.fixture
def shell_only_image(engine: Any) -> Iterator[str]:
    """An image with `/bin/sh` and `sleep` and nothing else (no python3): its ID."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in {*_with_libraries("dash"), *_with_libraries("sleep")}:
            tar.add(path.resolve(), arcname=str(path).lstrip("/"))
        tar.add(Path(shutil.which("dash") or "/bin/dash").resolve(), arcname="bin/sh")
    found = engine.images.client.api.import_image_from_data(
        buffer.getvalue(), repository="bastion-shell-only-test"
    )
    image_id = re.search(r"sha256:[0-9a-f]{64}", str(found))
    assert image_id is not None, found
    yield image_id.group(0)
    for container in engine.containers.list(all=True, filters={"ancestor": image_id.group(0)}):
        container.remove(force=True)
    engine.images.remove(image_id.group(0), force=True)


async def test_an_image_without_python3_is_refused_with_a_sentence(
    client: Client,
    run_service: ServiceRunner,
    settings: SandboxSettings,
    workspace: Path,
    shell_only_image: str,
) -> None:
    # git's mounts are checked with `stat`, which this image lacks too
    writable = msgspec.structs.replace(settings, git_writable=True)
    backend = f"docker:bastion-shell-only-test@{shell_only_image}"
    async with run_service(sandbox_service, writable):
        ran = await shell(client, workspace, backend, "echo plain")
        with pytest.raises(RemoteError) as refused:
            await bg_run(client, workspace, backend, "sleep 3111")
    assert ran.stdout == "plain\n"
    assert "python3" in refused.value.message and "use an image with" in refused.value.message


async def test_a_task_past_its_wall_clock_ends_failed_with_nothing_left(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    start = TaskStart(exec=_exec(workspace, backend_name, "sleep 3121"), timeout_ms=1000)
    started = await request(client, subjects.SANDBOX_TASK_START, start, TaskStarted, timeout_s=60)
    ended = await until_ended(client, started.id)
    assert (ended.status, ended.error, ended.stopped_by) == ("failed", "timeout", "timeout")
    assert not [line for line in commands_in(engine, owner) if "sleep 3121" in line]


async def test_closing_the_session_cancels_its_tasks_and_removes_the_container(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    started = await bg_run(client, workspace, backend_name, "echo up; sleep 3131")
    await until_said(client, started.id, "up")
    removed = await release(client, SESSION)
    ended = await until_ended(client, started.id)
    assert removed == 1 and not containers_of(engine, owner, SESSION)
    assert (ended.status, ended.stopped_by) == ("cancelled", "session_closed")


async def test_a_shell_command_past_its_wall_clock_ends_the_sessions_tasks_failed(
    client: Client, sandbox: None, workspace: Path, backend_name: str
) -> None:
    started = await bg_run(client, workspace, backend_name, "echo up; sleep 3141")
    await until_said(client, started.id, "up")
    stuck = msgspec.structs.replace(
        _exec(workspace, backend_name, "sleep 3142"), limits=Limits(wall_s=1)
    )
    result = await request(client, subjects.SANDBOX_EXEC, stuck, ExecResult, timeout_s=60)
    ended = await until_ended(client, started.id)
    assert result.ended == "timeout"
    assert (ended.status, ended.exit_code, ended.error) == ("failed", 137, "exit_status")


async def test_a_task_started_after_its_container_went_runs_in_a_new_one(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    await shell(client, workspace, backend_name, "true")
    [gone] = containers_of(engine, owner, SESSION)
    gone.remove(force=True)
    started = await bg_run(client, workspace, backend_name, "echo again")
    ended = await until_ended(client, started.id)
    [container] = containers_of(engine, owner, SESSION)
    assert (ended.status, (await bg_output(client, started.id)).text) == ("succeeded", "again\n")
    assert container.id != gone.id
