"""Hooks as NATS services: a before-tool hook blocks (and one that fails blocks too),
patterns select the calls, an after-tool hook's answer is added marked as its own, and
with no hook registered no one is asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.msg import Msg

from bastion.orchestrator.hooks import Hooks
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.hooks import HookAnswer, HookEvent, HookRegistration, RunMark, RunMarked
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.codec import encode
from bastion.shared.patterns import pattern_matches
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.hookservice import hook
from tests.helpers.session import call, open_session, orchestrator


def guard(event: HookEvent) -> HookAnswer:
    if "rm " in str(event.input.get("command", "")):
        return HookAnswer(block=True, reason="no deleting in this workspace")
    return HookAnswer()


@pytest.mark.usefixtures("plane")
async def test_a_before_tool_hook_blocks_a_call_with_its_reason_and_lets_others_run(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    (workspace / "keep.txt").write_text("kept")
    asked = await hook(
        client, HookRegistration(name="guard", events=("before_tool",), tools=("shell",)), guard
    )
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        blocked = await call(client, session.session_id, "shell", command="rm keep.txt")
        ran = await call(client, session.session_id, "shell", command="echo fine")
        wrote = await call(client, session.session_id, "write_file", path="w", content="w")
    assert isinstance(blocked, ErrorReply) and blocked.code == "hook_blocked"
    assert blocked.message == (
        "blocked by the before-tool hook guard: no deleting in this workspace"
    )
    assert (workspace / "keep.txt").exists()
    assert isinstance(ran, ToolOutput) and "fine" in ran.text
    assert isinstance(wrote, ToolOutput)
    # the pattern chose shell only: write_file was never asked about
    assert [(e.event, e.tool, e.outcome) for e in asked] == [
        ("before_tool", "shell", "allow"),
        ("before_tool", "shell", "allow"),
    ]
    assert asked[0].input == {"command": "rm keep.txt"} and asked[0].workspace == str(workspace)


@pytest.mark.usefixtures("plane")
async def test_a_before_tool_hook_that_does_not_answer_in_time_blocks_the_call(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    await hook(
        client,
        HookRegistration(name="slow", events=("before_tool",), timeout_s=0.2),
        lambda _: None,
    )
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        blocked = await call(client, session.session_id, "write_file", path="a", content="a")
    assert isinstance(blocked, ErrorReply) and blocked.code == "hook_blocked"
    assert "the before-tool hook slow failed (no answer on" in blocked.message
    assert "a hook that fails blocks the call" in blocked.message
    assert not (workspace / "a").exists()


@pytest.mark.usefixtures("plane")
async def test_a_registered_hook_that_is_gone_blocks_rather_than_letting_calls_through(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    await Hooks.open(client, subjects.HOOKS_BUCKET)
    kv = await client.jetstream().key_value(subjects.HOOKS_BUCKET)
    await kv.put("gone", encode(HookRegistration(name="gone", events=("before_tool",))))
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        blocked = await call(client, session.session_id, "list_files")
    assert isinstance(blocked, ErrorReply) and blocked.code == "hook_blocked"
    assert "no service answers" in blocked.message


@pytest.mark.usefixtures("plane")
async def test_an_after_tool_hooks_answer_is_added_to_the_result_marked_as_its_own(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    asked = await hook(
        client,
        HookRegistration(name="notes", events=("after_tool",), tools=("write_*", "edit_*")),
        lambda e: HookAnswer(text=f"remember to test {e.input.get('path')}"),
    )
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        wrote = await call(client, session.session_id, "write_file", path="a.py", content="x")
        listed = await call(client, session.session_id, "list_files")
    assert isinstance(wrote, ToolOutput) and isinstance(listed, ToolOutput)
    assert wrote.text == "wrote 1 bytes to a.py\n[hook notes]\nremember to test a.py"
    assert "[hook" not in listed.text
    assert [(e.event, e.tool, e.text) for e in asked] == [
        ("after_tool", "write_file", "wrote 1 bytes to a.py")
    ]


@pytest.mark.usefixtures("plane")
async def test_run_hooks_are_told_of_a_runs_start_and_end_and_may_add_a_note(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    asked = await hook(
        client,
        HookRegistration(name="runs", events=("run_start", "run_end")),
        lambda e: HookAnswer(text="the build is red" if e.event == "run_start" else "ignored"),
    )
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        marks = []
        for mark in (
            RunMark(session_id=session.session_id, event="run_start", task="fix it"),
            RunMark(session_id=session.session_id, event="run_end", ended="done"),
        ):
            marked: RunMarked = await request(
                client, subjects.SESSION_RUN, mark, RunMarked, timeout_s=10
            )
            marks.append(marked.notes)
    assert marks == [("[hook runs] the build is red",), ()]
    assert [(e.event, e.text, e.ended) for e in asked] == [
        ("run_start", "fix it", ""),
        ("run_end", "", "done"),
    ]


@pytest.mark.usefixtures("plane")
async def test_with_no_hook_registered_no_one_is_asked(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    heard: list[str] = []

    async def listen(msg: Msg) -> None:
        heard.append(msg.subject)

    await client.subscribe(f"{subjects.PREFIX}.hooks.>", cb=listen)
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        ran = await call(client, session.session_id, "shell", command="true")
    await client.flush()
    assert isinstance(ran, ToolOutput) and heard == []


@pytest.mark.parametrize(
    ("patterns", "name", "matches"),
    [
        (("*",), "anything", True),
        (("shell",), "shell", True),
        (("shell",), "shellx", False),
        (("github_*",), "github_search", True),
        (("github_*",), "gitlab_search", False),
        (("*_file",), "write_file", True),
        (("a.c",), "abc", False),
    ],
)
def test_a_pattern_star_stands_for_any_characters_and_nothing_else_is_special(
    patterns: tuple[str, ...], name: str, matches: bool
) -> None:
    assert pattern_matches(patterns, name) is matches
