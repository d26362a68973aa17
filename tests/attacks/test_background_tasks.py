"""What an agent could try with background tasks: reach another session's, outlive its own
session or `bg_stop`, reach the sandbox's init, or rewrite its own log."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import ToolOutput
from bastion.sandbox.tasks.runner import KEPT_ENDED
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from tests.helpers.bus import Plane
from tests.helpers.session import call, open_session, tool
from tests.helpers.sleepers import processes_with


async def ended(client: Client, session_id: str, task_id: str) -> dict[str, Any]:
    while True:
        got: dict[str, Any] = await tool(client, session_id, "bg_output", id=task_id, limit=65536)
        if got["eof"]:
            return got
        await anyio.sleep(0.1)


async def test_another_session_of_the_same_tenant_and_workspace_finds_no_task_of_mine(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        a = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        b = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        mine = await tool(client, a.session_id, "bg_run", command="echo private; sleep 300")
        listed = await tool(client, b.session_id, "bg_list")
        read = await call(client, b.session_id, "bg_output", id=mine["id"])
        stop = await call(client, b.session_id, "bg_stop", id=mine["id"])
        still = await tool(client, a.session_id, "bg_list")
    assert listed == {"tasks": []}
    for refused in (read, stop):
        assert isinstance(refused, ErrorReply) and refused.code == "not_found"
        assert "private" not in refused.message
    assert [t["status"] for t in still["tasks"]] == ["running"]


async def test_no_task_is_left_running_once_its_session_closed(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        await tool(client, session.session_id, "bg_run", command="sleep 317 & sleep 318; wait")
        while not processes_with("sleep 318"):  # noqa: ASYNC110 (a process, not an event)
            await anyio.sleep(0.05)
        await request(
            client,
            subjects.SESSION_CLOSE,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=30,
        )
        left = processes_with("sleep 317") + processes_with("sleep 318")
    assert left == []


async def test_a_task_that_double_forks_or_setsids_does_not_survive_bg_stop(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        started = await tool(
            client,
            session.session_id,
            "bg_run",
            command=(
                "trap '' TERM; setsid sh -c 'trap \"\" TERM; sleep 319' & "
                "(sh -c 'sleep 320 &' &); nohup sleep 321 >/dev/null 2>&1 & sleep 322"
            ),
        )
        sleeps = [f"sleep {n}" for n in (319, 320, 321, 322)]
        while not all(processes_with(each) for each in sleeps):  # noqa: ASYNC110 (processes)
            await anyio.sleep(0.05)
        stopped = await tool(client, session.session_id, "bg_stop", id=started["id"])
        left = [pid for each in sleeps for pid in processes_with(each)]
    assert stopped["status"] == "cancelled"
    assert left == []


async def test_a_task_cannot_see_the_sandboxs_init_nor_rewrite_its_own_log(
    client: Client, plane_of: Plane, workspace: Path, sandbox_state_dir: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        started = await tool(
            client,
            session.session_id,
            "bg_run",
            command=(
                "echo first-line; "
                "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'ini[t][.]py'; "
                "kill -9 -1 2>/dev/null; "
                f"ls {sandbox_state_dir} 2>&1 | head -1; "
                "for f in $(find / -name '*.log' -path '*tasks*' 2>/dev/null); do : > $f; done; "
                "echo last-line"
            ),
        )
        got = await ended(client, session.session_id, started["id"])
        after = await call(client, session.session_id, "shell", command="echo still-here")
    logs = list((sandbox_state_dir / "tasks").rglob("*.log"))
    assert got["text"].startswith("first-line\n0\n")  # no init in its /proc
    assert "No such file or directory" in got["text"]  # the state dir is not there
    assert got["text"].endswith("last-line\n")
    assert [log.read_text() for log in logs] == [got["text"]]
    assert isinstance(after, ToolOutput) and "still-here" in after.text


def _repository(workspace: Path) -> None:
    """A repository with one commit, made by the workspace's owner (uid 1000)."""
    for args in (
        ("init", "-q"),
        (
            "-c",
            "user.name=o",
            "-c",
            "user.email=o@x",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "first",
        ),
    ):
        subprocess.run(
            ["git", "-c", "safe.directory=*", *args],
            cwd=workspace, check=True, capture_output=True,
        )  # fmt: skip
    for path in [workspace, *workspace.rglob("*")]:
        os.lchown(path, 1000, 1000)


async def test_a_task_cannot_plant_what_git_reads_while_later_commands_are_swept(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    """A task runs past the sweep that ends each command: were `.git` writable to it, a
    `commondir` (or `alternates`, hooks, config) it put back after each sweep would stay
    for the host's git. It sees `.git` read-only, so nothing of it lands there."""
    _repository(workspace)
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(
            client,
            sid,
            "bg_run",
            command=(
                "cp -a .git ev; "
                "for i in 1 2 3 4 5 6 7 8 9 10; do "
                "echo ../ev > .git/commondir; mkdir -p .git/objects/info; "
                "echo /etc > .git/objects/info/alternates; echo x >> .git/config; "
                "sleep 0.2; done 2>&1 | sort | uniq -c"
            ),
        )
        for _ in range(3):  # commands beside it, each swept as it ends
            swept = await call(client, sid, "shell", command="true")
            assert isinstance(swept, ToolOutput), swept
        got = await ended(client, sid, started["id"])
    assert "Read-only file system" in got["text"], got["text"]
    assert not (workspace / ".git" / "commondir").exists()
    assert not (workspace / ".git" / "objects" / "info" / "alternates").exists()
    assert "x\n" not in (workspace / ".git" / "config").read_text()


async def test_a_session_keeps_only_its_last_ended_tasks_and_its_close_forgets_them_all(
    client: Client, plane_of: Plane, workspace: Path, sandbox_state_dir: Path
) -> None:
    """Ended tasks' logs stay readable for a while but cannot pile up on the state dir's
    disk: a session keeps its last `KEPT_ENDED`, and none once it closed."""
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        first = None
        for _ in range(KEPT_ENDED + 3):
            started = await tool(
                client, sid, "bg_run", command="head -c 1000 /dev/zero | tr '\\0' x"
            )
            first = first or started["id"]
            await ended(client, sid, started["id"])
        listed = await tool(client, sid, "bg_list", limit=50)
        logs = sorted((sandbox_state_dir / "tasks" / sid).glob("*.log"))
        gone = await call(client, sid, "bg_output", id=first)
        await request(
            client, subjects.SESSION_CLOSE, SessionRef(session_id=sid), SessionInfo, timeout_s=30
        )
    assert len(listed["tasks"]) == KEPT_ENDED and len(logs) == KEPT_ENDED
    assert isinstance(gone, ErrorReply) and gone.code == "not_found", gone
    assert not (sandbox_state_dir / "tasks" / sid).exists()


async def test_what_outlived_the_sweeps_is_moved_aside_when_the_session_closes(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    """A `commondir` or a linked `alternates` something of the session left after the last
    command's sweep (here put there from outside, as a process fed a descriptor of `.git`
    would) does not stay for the host's git once the session closed."""
    _repository(workspace)
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        ran = await call(client, session.session_id, "shell", command="true")
        assert isinstance(ran, ToolOutput), ran
        git = workspace / ".git"
        (git / "commondir").write_text("../ev\n")
        (git / "objects/info/alternates").symlink_to("/etc/shadow")
        (workspace / ".gitconfig").mkdir()  # an odd entry that refuses a run's plan
        (git / "logs").rename(workspace / "mylogs")
        (git / "logs").symlink_to("../mylogs")
        await request(
            client,
            subjects.SESSION_CLOSE,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=30,
        )
    assert not (git / "commondir").exists()
    assert not (git / "objects/info/alternates").is_symlink()
    assert not (git / "logs").is_symlink()
    assert [p.name for p in git.iterdir() if p.name.startswith("commondir.refused-")]


async def test_what_outlived_a_sweep_is_moved_aside_even_when_the_run_is_refused(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    """An odd entry the next run refuses (`.gitconfig` a directory) does not keep a planted
    `commondir` or `alternates` link in place: they are moved aside first."""
    _repository(workspace)
    git = workspace / ".git"
    (git / "commondir").write_text("../ev\n")
    (git / "objects/info/alternates").symlink_to("/etc/shadow")
    (workspace / ".gitconfig").mkdir()
    async with plane_of():
        with pytest.raises(RemoteError) as refused:  # the opening's check plans it too
            await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
    assert ".gitconfig" in refused.value.message
    assert not (git / "commondir").exists()
    assert not (git / "objects/info/alternates").is_symlink()
