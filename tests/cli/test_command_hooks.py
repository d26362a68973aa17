"""Command hooks: kept by `bastion hooks add|list|remove`, run by the hook runner with the
event on stdin, and answered by their exit status; a hooks file others may change is
refused and blocks every call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bastion.hooks.command import hook_environment
from bastion.hooks.service import HookRunner, answer_event
from bastion.proto.errors import ErrorReply
from bastion.proto.hooks import HookEvent
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client
from bastion.shared.hookfile import CommandHook, hooks_path, save_hooks
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session, orchestrator

BASTION = [sys.executable, "-m", "bastion.cli"]
SID = "0123456789abcdef"


def script(directory: Path, name: str, body: str) -> str:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def before(tool: str = "shell", **tool_input: object) -> HookEvent:
    return HookEvent(
        event="before_tool",
        session_id=SID,
        tenant="default",
        agent="tester",
        tool=tool,
        input=dict(tool_input),
        outcome="allow",
    )


def hooks_cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BASTION, "hooks", args[0], "--state-dir", str(state_dir), *args[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_hooks_add_list_and_remove_keep_a_file_only_its_owner_may_change(tmp_path: Path) -> None:
    state = tmp_path / "state"
    added = hooks_cli(state, "add", "--event", "before-tool", "--tool", "shell", "--", "/g.sh", "x")
    assert added.returncode == 0, added.stderr
    assert "added 1. before-tool --tool shell --timeout 30 -- /g.sh x" in added.stdout
    hooks_cli(
        state, "add", "--event", "after-tool", "--tool", "github_*", "--timeout", "5", "--", "/l.sh"
    )
    listed = hooks_cli(state, "list")
    assert listed.stdout.splitlines() == [
        "1. before-tool --tool shell --timeout 30 -- /g.sh x",
        "2. after-tool --tool github_* --timeout 5 -- /l.sh",
    ]
    assert (hooks_path(state).stat().st_mode & 0o777) == 0o600
    removed = hooks_cli(state, "remove", "1")
    assert removed.returncode == 0 and "removed 1. before-tool" in removed.stdout
    assert hooks_cli(state, "list").stdout.splitlines() == [
        "1. after-tool --tool github_* --timeout 5 -- /l.sh"
    ]
    gone = hooks_cli(state, "remove", "7")
    assert gone.returncode == 2 and "there is no hook 7" in gone.stderr


async def test_exit_0_lets_a_call_run_and_the_hook_reads_the_event_and_its_environment(
    tmp_path: Path,
) -> None:
    # Under a root runner a hook in a workspace runs as the workspace's owner: it writes
    # where that user may.
    seen = owned(tmp_path / "seen-by-hook") / "seen"
    guard = script(
        tmp_path,
        "guard.sh",
        f'cat > {seen}.json; echo "$BASTION_HOOK_EVENT $BASTION_SESSION $PWD" > {seen}.env\n',
    )
    workspace = owned(tmp_path / "work")
    save_hooks(hooks_path(tmp_path), [CommandHook(event="before-tool", command=[guard])])
    event = before(command="ls")
    answer = await answer_event(
        HookEvent(**{**_fields(event), "workspace": str(workspace)}), tmp_path
    )
    assert not answer.block
    told = json.loads(seen.with_suffix(".json").read_text())
    assert told == {
        "event": "before-tool",
        "session": SID,
        "tenant": "default",
        "agent": "tester",
        "tool": "shell",
        "input": {"command": "ls"},
        "outcome": "allow",
    }
    assert seen.with_suffix(".env").read_text() == f"before-tool {SID} {workspace}\n"


def _fields(event: HookEvent) -> dict[str, object]:
    return {f: getattr(event, f) for f in event.__struct_fields__}


@pytest.mark.parametrize(
    ("body", "timeout_s", "reason"),
    [
        ("echo 'no rm here' >&2; exit 2\n", 30.0, "no rm here"),
        ("echo 'only stdout'; exit 2\n", 30.0, "only stdout"),
        ("echo broken >&2; exit 1\n", 30.0, "failed, exit status 1: broken; a failing hook blocks"),
        ("sleep 30\n", 0.3, "failed, ran out of its 0.3 s; a failing hook blocks"),
    ],
    ids=["exit-2-stderr", "exit-2-stdout", "exit-1", "timeout"],
)
async def test_a_before_tool_hook_blocks_on_exit_2_and_on_any_other_failure(
    tmp_path: Path, body: str, timeout_s: float, reason: str
) -> None:
    guard = script(tmp_path, "guard.sh", body)
    save_hooks(
        hooks_path(tmp_path),
        [CommandHook(event="before-tool", command=[guard], timeout_s=timeout_s)],
    )
    answer = await answer_event(before(command="rm -rf /"), tmp_path)
    assert answer.block
    assert reason in answer.reason


async def test_a_hook_that_cannot_start_blocks(tmp_path: Path) -> None:
    save_hooks(
        hooks_path(tmp_path), [CommandHook(event="before-tool", command=[str(tmp_path / "nope")])]
    )
    answer = await answer_event(before(command="ls"), tmp_path)
    assert answer.block and "did not start" in answer.reason


async def test_tool_patterns_choose_the_calls_a_hook_is_run_for(tmp_path: Path) -> None:
    blocker = script(tmp_path, "block.sh", "exit 2\n")
    save_hooks(
        hooks_path(tmp_path),
        [CommandHook(event="before-tool", command=[blocker], tools=["github_*"])],
    )
    assert not (await answer_event(before(command="ls"), tmp_path)).block
    assert (await answer_event(before("github_search", q="x"), tmp_path)).block


async def test_after_tool_output_is_added_and_a_failure_is_logged_not_blocking(
    tmp_path: Path,
) -> None:
    note = script(tmp_path, "note.sh", "echo 'ran the linter: clean'\n")
    broken = script(tmp_path, "broken.sh", "exit 3\n")
    save_hooks(
        hooks_path(tmp_path),
        [
            CommandHook(event="after-tool", command=[broken]),
            CommandHook(event="after-tool", command=[note]),
        ],
    )
    event = HookEvent(
        event="after_tool",
        session_id=SID,
        tenant="t",
        agent="a",
        tool="shell",
        text="exit status 0",
    )
    answer = await answer_event(event, tmp_path)
    assert not answer.block and answer.text == "ran the linter: clean"
    logged = [json.loads(line) for line in (tmp_path / "hooks.log").read_text().splitlines()]
    assert [(e["event"], e["failure"]) for e in logged] == [
        ("after-tool", "command hook 1 (broken.sh) failed, exit status 3")
    ]


async def test_a_hooks_file_others_may_change_is_refused_and_blocks_every_call(
    tmp_path: Path,
) -> None:
    allow = script(tmp_path, "allow.sh", "exit 0\n")
    save_hooks(hooks_path(tmp_path), [CommandHook(event="after-tool", command=[allow])])
    os.chmod(hooks_path(tmp_path), 0o666)
    answer = await answer_event(before("read_file", path="a"), tmp_path)
    assert answer.block and "may be changed by someone other than its owner" in answer.reason
    assert f"chmod go-w {hooks_path(tmp_path)}" in answer.reason
    listed = hooks_cli(tmp_path, "list")
    assert listed.returncode == 1 and "refused" in listed.stderr


@pytest.mark.usefixtures("plane")
async def test_the_hook_runner_blocks_a_call_through_the_orchestrator_with_the_hooks_reason(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    guard = script(
        tmp_path,
        "guard.sh",
        'grep -q "rm " && { echo "deleting is not allowed here" >&2; exit 2; }\nexit 0\n',
    )
    after = script(tmp_path, "after.sh", "echo 'checked by after.sh'\n")
    save_hooks(
        hooks_path(state),
        [
            CommandHook(event="before-tool", command=[guard], tools=["shell"]),
            CommandHook(event="after-tool", command=[after], tools=["shell"]),
        ],
    )
    workspace = owned(tmp_path / "work")
    (workspace / "keep").write_text("k")
    runner = await HookRunner.open(client, state)
    await runner.register()  # registered before the orchestrator starts: it reads it at start
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(runner.serve)
        async with orchestrator(run_service, bus_settings):
            session = await open_session(
                client, workspace=str(workspace), shell=True, autonomy="L3"
            )
            blocked = await call(client, session.session_id, "shell", command="rm keep")
            ran = await call(client, session.session_id, "shell", command="echo hi")
            wrote = await call(client, session.session_id, "write_file", path="w", content="w")
        tasks.cancel_scope.cancel()
    assert isinstance(blocked, ErrorReply) and blocked.code == "hook_blocked"
    assert blocked.message == (
        "blocked by the before-tool hook commands: deleting is not allowed here"
    )
    assert (workspace / "keep").exists()
    assert isinstance(ran, ToolOutput)
    assert ran.text == "exit status 0\n--- stdout\nhi\n[hook commands]\nchecked by after.sh"
    assert isinstance(wrote, ToolOutput) and "[hook" not in wrote.text


def test_a_hooks_git_in_a_repository_is_pinned_to_the_workspaces_own_dot_git(
    tmp_path: Path,
) -> None:
    """A `commondir` put back since the last sweep cannot lead a hook's git to another
    config (where a filter would run): its git dir and common dir are the workspace's."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    (workspace / "ev").mkdir()
    (workspace / ".git" / "commondir").write_text("../ev\n")
    env = hook_environment("after-tool", "0123456789abcdef", str(workspace))
    common = subprocess.run(
        ["git", "rev-parse", "--git-common-dir"],
        cwd=workspace, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(common.stdout.strip()).resolve() == (workspace / ".git").resolve()
    assert "GIT_DIR" not in hook_environment("after-tool", "0123456789abcdef", None)
