"""The orchestrator: sessions kept in JetStream, calls routed policy → sandbox → result."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from nats.aio.msg import Msg

from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.events import CallDecided, CallFinished, Event, SessionOpened
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import CallResult, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.codec import decode
from bastion.shared.errors import RemoteError, Unavailable
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner, raw_request
from tests.helpers.session import call, open_session, orchestrator


async def test_a_call_runs_through_policy_and_sandbox_and_comes_back_as_output(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        assert [t.name for t in session.tools][:2] == ["read_file", "write_file"]
        assert "shell" in [t.name for t in session.tools]
        wrote = await call(client, session.session_id, "write_file", path="a.txt", content="hi\n")
        assert isinstance(wrote, ToolOutput) and "a.txt" in wrote.text
        ran = await call(client, session.session_id, "shell", command="cat a.txt; exit 3")
    assert isinstance(ran, ToolOutput)
    assert ran.text.startswith("exit status 3\n--- stdout\nhi")
    assert ran.decision.outcome == "allow" and ran.decision.rule == "level.L3.write"
    assert (workspace / "a.txt").read_text() == "hi\n"


async def test_a_restarted_orchestrator_still_knows_and_serves_an_open_session(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        await call(client, session.session_id, "write_file", path="kept.txt", content="kept")
    # The first orchestrator is gone: nothing answers until another one starts.
    with pytest.raises(Unavailable):
        await request(
            client,
            subjects.SESSION_GET,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=2,
        )
    async with orchestrator(run_service, bus_settings):
        again: SessionInfo = await request(
            client,
            subjects.SESSION_GET,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=10,
        )
        result = await call(client, session.session_id, "shell", command="cat kept.txt")
    assert again.state == "open" and again.calls == 1 and again.workspace == str(workspace)
    assert isinstance(result, ToolOutput) and "kept" in result.text


@pytest.mark.parametrize(
    ("autonomy", "tool", "code", "words"),
    [
        ("L1", "write_file", "denied", "runs from L3"),
        ("L2", "write_file", "needs_approval", "--no-ask, so nobody can be asked"),
        ("L0", "read_file", "needs_approval", "runs without asking from L1"),
    ],
)
async def test_a_call_the_level_does_not_run_is_refused_with_the_reason_and_not_run(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    autonomy: str,
    tool: str,
    code: str,
    words: str,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy=autonomy, ask=False)
        tool_input = {"path": "x.txt"} | ({"content": "no"} if tool == "write_file" else {})
        result = await call(client, session.session_id, tool, **tool_input)
    assert isinstance(result, ErrorReply)
    assert result.code == code and words in result.message
    assert not (workspace / "x.txt").exists()


async def test_unknown_tools_bad_input_and_closed_sessions_get_typed_errors(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        unknown = await call(client, session.session_id, "shell", command="true")
        bad = await call(client, session.session_id, "write_file", path="a.txt")
        extra = await call(client, session.session_id, "read_file", path="a.txt", sneaky=1)
        closed: SessionInfo = await request(
            client,
            subjects.SESSION_CLOSE,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=10,
        )
        after = await call(client, session.session_id, "read_file", path="a.txt")
    assert isinstance(unknown, ErrorReply) and unknown.code == "unknown_tool"
    assert "read_file, write_file" in unknown.message  # no shell was asked for
    assert isinstance(bad, ErrorReply) and bad.code == "invalid_input" and "content" in bad.message
    assert (
        isinstance(extra, ErrorReply)
        and extra.code == "invalid_input"
        and "read_file takes: path, offset, limit" in extra.message
    )
    assert closed.state == "closed" and closed.closed_at is not None
    assert isinstance(after, ErrorReply) and after.code == "session_closed"


async def test_a_session_that_does_not_exist_is_not_found(
    client: Client, plane: None, run_service: ServiceRunner, bus_settings: BusSettings
) -> None:
    async with orchestrator(run_service, bus_settings):
        with pytest.raises(RemoteError) as missing:
            await request(
                client,
                subjects.SESSION_GET,
                SessionRef(session_id="0" * 16),
                SessionInfo,
                timeout_s=5,
            )
        result = await call(client, "f" * 16, "read_file", path="a")
    assert missing.value.code == "not_found"
    assert isinstance(result, ErrorReply) and result.code == "not_found"


@pytest.mark.parametrize(
    "subject",
    [
        subjects.SESSION_OPEN,
        subjects.SESSION_GET,
        subjects.SESSION_CLOSE,
        subjects.session_call("0" * 16),
    ],
)
async def test_a_message_of_the_wrong_shape_gets_a_bad_request_reply(
    client: Client, plane: None, run_service: ServiceRunner, bus_settings: BusSettings, subject: str
) -> None:
    async with orchestrator(run_service, bus_settings):
        reply = await raw_request(client, subject, b"\x93not a message")
    error = decode(reply.data, ErrorReply)
    assert error.code == "bad_request"


async def test_an_open_session_refuses_a_shell_without_a_workspace_and_a_relative_one(
    client: Client, plane: None, run_service: ServiceRunner, bus_settings: BusSettings
) -> None:
    async with orchestrator(run_service, bus_settings):
        with pytest.raises(RemoteError) as no_workspace:
            await open_session(client, shell=True)
        with pytest.raises(RemoteError) as relative:
            await open_session(client, workspace="work")
    assert (
        no_workspace.value.code == "invalid_input" and "--workspace" in no_workspace.value.message
    )
    assert relative.value.code == "invalid_input" and "absolute" in relative.value.message


async def test_every_call_is_published_as_events_on_the_tenants_subjects(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    seen: list[Event] = []
    received = anyio.Event()

    async def collect(msg: Msg) -> None:
        seen.append(decode(msg.data, Event))
        if isinstance(seen[-1], CallFinished):
            received.set()

    subscription = await client.subscribe(subjects.EVENTS_ALL, cb=collect)
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), tenant="acme", autonomy="L3")
        await call(client, session.session_id, "write_file", path="e.txt", content="e")
        with anyio.fail_after(5):
            await received.wait()
    await subscription.unsubscribe()
    kinds = [type(e) for e in seen]
    assert kinds == [SessionOpened, CallDecided, CallFinished]
    assert all(e.tenant == "acme" for e in seen)


async def test_calls_of_one_session_run_one_at_a_time_in_order(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        results: dict[int, CallResult] = {}

        async def append(n: int) -> None:
            results[n] = await call(
                client,
                session.session_id,
                "shell",
                command=f"echo start {n} >> log; echo end {n} >> log",
            )

        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(append, n)
    lines = (workspace / "log").read_text().splitlines()
    assert len(lines) == 10
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.split()[1] == end.split()[1]  # no call interleaved with another
    assert all(isinstance(r, ToolOutput) for r in results.values())


async def test_a_session_at_l3_offers_the_code_tools_and_an_edit_runs_end_to_end(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        effects = {t.name: t.effect for t in session.tools}
        edited = await call(
            client, session.session_id, "edit_file", path="a.py", old_string="1", new_string="2"
        )
        found = await call(client, session.session_id, "search_files", pattern="x =")
        typo = await call(client, session.session_id, "edit_file", path="a.py", old="1")
    assert effects == {
        "read_file": "read",
        "write_file": "write",
        "edit_file": "write",
        "apply_patch": "write",
        "list_files": "read",
        "find_files": "read",
        "search_files": "read",
        "shell": "write",
        "bg_run": "write",
        "bg_list": "write",
        "bg_output": "write",
        "bg_stop": "write",
        "diagnostics": "write",
        "run_tests": "write",
        "run_code": "read",
    }
    assert isinstance(edited, ToolOutput) and edited.decision.rule == "level.L3.write"
    assert edited.text == "edited a.py: replaced old_string 1 time"
    assert isinstance(found, ToolOutput) and found.text == "a.py:1: x = 2"
    assert isinstance(typo, ErrorReply) and typo.code == "invalid_input"
    assert (workspace / "a.py").read_text() == "x = 2\n"


async def test_a_session_without_a_shell_has_the_file_tools_but_no_checks(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L1")
        names = [t.name for t in session.tools]
        refused = await call(
            client, session.session_id, "apply_patch", patch="*** Begin Patch\n*** End Patch\n"
        )
    assert "edit_file" in names and "find_files" in names
    assert not {"shell", "bg_run", "bg_stop", "diagnostics", "run_tests", "run_code"} & set(names)
    assert isinstance(refused, ErrorReply) and refused.code == "denied"


async def test_a_sessions_limits_bound_every_command_and_a_call_may_only_lower_them(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(
            client,
            workspace=str(workspace),
            shell=True,
            autonomy="L3",
            limits={"wall_s": 1, "output_bytes": 2048},
        )
        slept = await call(client, session.session_id, "shell", command="sleep 30", timeout_s=600)
        printed = await call(
            client, session.session_id, "shell", command="head -c 100000 /dev/zero | tr '\\0' x"
        )
    assert session.limits.wall_s == 1 and session.limits.output_bytes == 2048
    assert session.limits.cpu_s == 120  # what was not asked keeps its default
    assert isinstance(slept, ToolOutput)
    assert slept.text.startswith("[timeout_s 600 is more than this session's wall-clock limit")
    assert "\ntimed out: the wall-clock limit of 1 s ran out" in slept.text
    assert isinstance(printed, ToolOutput) and "bytes cut" in printed.text
    assert len(printed.text) < 4096
