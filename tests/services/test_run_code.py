"""`run_code`: a Python program calling the session's tools that read, through real NATS,
policy, orchestrator and a bubblewrap sandbox; each call it makes is one of the session's
own, decided, journaled, audited under its parent, and refused when it would write."""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from bastion.cli.audit import format_record
from bastion.orchestrator.callrecords import record_key
from bastion.orchestrator.coderun import MAX_OUTPUT
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.hooks import HookAnswer, HookEvent, HookRegistration
from bastion.proto.journal import CallRecord
from bastion.proto.sandbox import ExecResult, RunCode
from bastion.proto.toolinput import MAX_CODE
from bastion.proto.tools import ToolOutput
from bastion.sandbox.runcode import MAX_CALLS
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.kv import TypedBucket
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import records_of
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.hookservice import hook
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session, orchestrator
from tests.helpers.tracing import Spans, span_ancestry
from tests.helpers.vault import add

REFUSED = "run_code calls only tools that read; make the write_file call yourself"


def fifty_files(workspace: Path) -> None:
    for n in range(50):
        (workspace / "src").mkdir(exist_ok=True)
        (workspace / "src" / f"f{n:02}.txt").write_text("unsafe\n" * (n % 3))
    owned(workspace)


async def run(client: Client, workspace: Path, code: str, **session: object) -> tuple[str, object]:
    opened = await open_session(
        client, workspace=str(workspace), shell=True, autonomy="L3", **session
    )
    return opened.session_id, await call(client, opened.session_id, "run_code", code=code)


READ_FIFTY = """
total = 0
paths = tools.find_files(pattern="src/*.txt").split()
for path in paths:
    total += tools.read_file(path=path).count("unsafe")
print("files:", len(paths), "unsafe:", total)
"""


async def test_a_program_reads_fifty_files_in_one_call(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    fifty_files(workspace)
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, READ_FIFTY)
    assert isinstance(result, ToolOutput), result
    assert result.text == f"files: 50 unsafe: {sum(n % 3 for n in range(50))}\n"


async def test_a_write_from_code_is_refused_to_the_program_and_the_file_is_untouched(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "notes.txt").write_text("mine\n")
    owned(workspace)
    code = (
        "try:\n"
        "    tools.write_file(path='notes.txt', content='theirs')\n"
        "except ToolError as error:\n"
        "    print(error.code, '|', error.message)\n"
    )
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, code)
    assert isinstance(result, ToolOutput), result
    assert result.text == f"{codes.DENIED} | {REFUSED}\n"
    assert (workspace / "notes.txt").read_text() == "mine\n"


async def test_a_failing_program_comes_back_as_an_error_with_its_traceback(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    code = "print('before')\ndef inner():\n    return {}['missing']\ninner()\n"
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, code)
    assert isinstance(result, ErrorReply), result
    assert result.code == codes.PROGRAM_FAILED
    assert result.message.startswith("the program failed (exit status 1):\nbefore\n")
    assert 'File "<program>", line 3, in inner' in result.message
    assert "return {}['missing']" in result.message
    assert result.message.endswith("KeyError: 'missing'")


async def test_the_call_past_the_most_a_program_makes_is_refused(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    owned(workspace)
    code = (
        f"for n in range({MAX_CALLS}):\n"
        "    tools.read_file(path='a.txt')\n"
        "print('made', n + 1)\n"
        "try:\n"
        "    tools.read_file(path='a.txt')\n"
        "except ToolError as error:\n"
        "    print(error.code, '|', error.message)\n"
    )
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, code)
    assert isinstance(result, ToolOutput), result
    made, refused = result.text.splitlines()
    assert made == f"made {MAX_CALLS}"
    assert refused == (
        f"{codes.QUOTA_EXCEEDED} | a run_code program makes at most {MAX_CALLS} tool calls and "
        f"this is call {MAX_CALLS + 1}: do the rest in another run_code call"
    )


async def test_a_programs_output_is_cut_at_the_most_the_model_is_shown(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    code = "print('a' * 20000)\nprint('z' * 20000)\n"
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, code)
    assert isinstance(result, ToolOutput), result
    assert len(result.text) < MAX_OUTPUT + 200
    assert result.text.startswith("a" * (MAX_OUTPUT // 2) + "\n[the output was cut: ")
    assert result.text.endswith("\n" + "z" * (MAX_OUTPUT // 2 - 1) + "\n")
    assert f"(run_code shows {MAX_OUTPUT})" in result.text


async def test_the_audit_and_the_call_records_hold_each_nested_call_under_its_parent(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    owned(workspace)
    code = (
        "print(tools.read_file(path='a.txt').strip())\n"
        "try:\n"
        "    call('write_file', path='b.txt', content='b')\n"
        "except ToolError:\n"
        "    pass\n"
    )
    async with orchestrator(run_service, bus_settings):
        session_id, result = await run(client, workspace, code)
        assert isinstance(result, ToolOutput), result
        records = [record for _, record in await records_of(client, "default", session_id)]
        calls = await TypedBucket.open(client, subjects.CALLS_BUCKET, CallRecord)
        nested = [r for r in records if r.parent_call_id]
        assert {r.parent_call_id for r in nested} == {result.call_id}
        reads = [r for r in nested if r.tool == "read_file"]
        assert [r.action for r in reads] == ["decision", "call", "result"]
        assert reads[0].outcome == "allow" and reads[2].outcome == "ok"
        assert len({r.call_id for r in reads}) == 1 and reads[0].call_id != result.call_id
        kept = await calls.find(record_key(session_id, reads[0].call_id))
    assert not [r for r in nested if r.tool == "write_file"]  # refused before any decision
    parent = [r for r in records if r.call_id == result.call_id]
    assert [r.action for r in parent] == ["decision", "call", "result"]
    assert not any(r.parent_call_id for r in parent)
    assert format_record(reads[1]).endswith(
        f"call read_file - - in run_code {result.call_id}  " + '{"path":"a.txt"}'
    )
    assert kept is not None
    assert (kept.value.tool, kept.value.state) == ("read_file", "done")
    assert kept.value.text.endswith("a")


async def test_each_nested_call_is_a_span_under_the_run_code_calls(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    spans: Spans,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    owned(workspace)
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, "tools.read_file(path='a.txt')")
    assert isinstance(result, ToolOutput), result
    finished = spans.finished()
    [nested] = [s for s in finished if s.name == "orchestrator.nested"]
    ancestry = span_ancestry(finished, nested)
    assert ancestry[:7] == [
        f"process {subjects.SESSION_NESTED_ANY}",
        f"send {subjects.SESSION_NESTED_ANY}",
        "sandbox.run_code",
        f"process {subjects.SANDBOX_RUN_CODE}",
        f"send {subjects.SANDBOX_RUN_CODE}",
        "orchestrator.execute",
        "orchestrator.journal.run",
    ]
    [execute] = [
        s
        for s in finished
        if s.name == "orchestrator.execute"
        and (s.attributes or {}).get("bastion.tool") == "run_code"
    ]
    assert execute in ancestors(finished, nested)


def ancestors(finished: tuple[ReadableSpan, ...], span: ReadableSpan) -> list[ReadableSpan]:
    by_id = {s.context.span_id: s for s in finished if s.context is not None}
    found = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        found.append(span)
    return found


async def test_a_tenants_secret_a_program_prints_is_cut_from_its_output(
    client: Client, plane_with_vault: Plane, workspace: Path
) -> None:
    value = "tok-" + secrets.token_urlsafe(24)
    owned(workspace)
    async with plane_with_vault():
        await add(client, "RUN_TOKEN", value.encode())
        code = f"import os\nprint({value!r})\nprint(sorted(os.environ))\n"
        _, result = await run(client, workspace, code)
    assert isinstance(result, ToolOutput), result
    said, environment = result.text.splitlines()
    assert value not in result.text and said == "[secret RUN_TOKEN]"
    assert "RUN_TOKEN" not in environment  # nothing is leased to a program


async def test_a_programs_calls_run_in_its_turn_while_a_write_waits_behind_it(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("before\n")
    owned(workspace)
    code = (
        "import time\n"
        "seen = [tools.read_file(path='a.txt').split()[-1]]\n"
        "time.sleep(2)\n"  # the write below is sent meanwhile and waits for this call
        "seen += [tools.read_file(path='a.txt').split()[-1] for _ in range(5)]\n"
        "print(seen)\n"
    )
    outcomes: dict[str, object] = {}
    async with orchestrator(run_service, bus_settings):
        opened = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = opened.session_id

        async def program() -> None:
            outcomes["run_code"] = await call(client, sid, "run_code", code=code)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(program)
                await first_nested_call(client, sid)
                outcomes["write"] = await call(
                    client, sid, "write_file", path="a.txt", content="after\n"
                )
    ran, wrote = outcomes["run_code"], outcomes["write"]
    assert isinstance(ran, ToolOutput) and ran.text == str(["before"] * 6) + "\n", ran
    assert isinstance(wrote, ToolOutput), wrote
    assert (workspace / "a.txt").read_text() == "after\n"


async def first_nested_call(client: Client, session_id: str) -> None:
    """Return once the audit holds a call a program made (bounded by the test's fail_after)."""
    while True:
        if [r for _, r in await records_of(client, "default", session_id) if r.parent_call_id]:
            return
        await anyio.sleep(0.05)


async def test_a_programs_calls_are_counted_against_its_tenants_calls_per_second(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    owned(workspace)
    # one token, and no second one for a hundred seconds: the run_code call takes it
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url, tenant_calls_per_s=0.01)
    code = (
        "try:\n"
        "    tools.read_file(path='a.txt')\n"
        "except ToolError as error:\n"
        "    print(error.code)\n"
    )
    async with run_service(orchestrator_service, settings):
        _, result = await run(client, workspace, code)
    assert isinstance(result, ToolOutput), result
    assert result.text == f"{codes.RATE_LIMITED}\n"


async def test_the_sandbox_refuses_run_code_for_a_docker_session(
    client: Client, plane: None, workspace: Path
) -> None:
    asked = RunCode(
        session_id="0123456789abcdef",
        workspace=str(workspace),
        call_id="c1",
        code="print(1)",
        backend="docker:img@sha256:" + "0" * 64,
    )
    with pytest.raises(RemoteError) as refused:
        await request(client, subjects.SANDBOX_RUN_CODE, asked, ExecResult, timeout_s=10)
    assert refused.value.code == codes.NOT_IMPLEMENTED
    assert "bwrap backend only" in refused.value.message


async def test_the_operators_hooks_are_asked_about_a_programs_calls_and_may_block_them(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "open.txt").write_text("open\n")
    (workspace / "closed.txt").write_text("closed\n")
    owned(workspace)

    def guard(event: HookEvent) -> HookAnswer:
        if event.event == "before_tool" and event.input.get("path") == "closed.txt":
            return HookAnswer(block=True, reason="not that one")
        return HookAnswer(text="seen by the guard" if event.event == "after_tool" else "")

    registration = HookRegistration(
        name="guard", events=("before_tool", "after_tool"), tools=("read_file",)
    )
    asked = await hook(client, registration, guard)
    code = (
        "print(tools.read_file(path='open.txt'))\n"
        "try:\n"
        "    tools.read_file(path='closed.txt')\n"
        "except ToolError as error:\n"
        "    print(error.code, error.message)\n"
    )
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, code)
    assert isinstance(result, ToolOutput), result
    assert "open" in result.text and "seen by the guard" in result.text
    assert result.text.rstrip().endswith(
        f"{codes.HOOK_BLOCKED} blocked by the before-tool hook guard: not that one"
    )
    assert [(e.event, e.input.get("path")) for e in asked] == [
        ("before_tool", "open.txt"),
        ("after_tool", "open.txt"),
        ("before_tool", "closed.txt"),
    ]


async def test_a_program_of_the_most_size_runs_and_a_larger_one_is_refused(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    line = "# é" + "x" * 60 + "\n"  # more bytes than characters, and more than a pipe holds
    body = "print('ran')\n"
    largest = line * ((MAX_CODE - len(body)) // len(line)) + body
    async with orchestrator(run_service, bus_settings):
        _, ran = await run(client, workspace, largest)
        _, refused = await run(client, workspace, largest + "#" * MAX_CODE)
    assert len(largest.encode()) > 64 * 1024
    assert isinstance(ran, ToolOutput) and ran.text == "ran\n", ran
    assert isinstance(refused, ErrorReply) and refused.code == codes.INVALID_INPUT


async def test_with_two_orchestrator_replicas_a_programs_calls_are_made_wherever_they_land(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    fifty_files(workspace)
    async with orchestrator(run_service, bus_settings), orchestrator(run_service, bus_settings):
        session_id, result = await run(client, workspace, READ_FIFTY)
        records = [record for _, record in await records_of(client, "default", session_id)]
    assert isinstance(result, ToolOutput), result
    assert result.text == f"files: 50 unsafe: {sum(n % 3 for n in range(50))}\n"
    made = [r for r in records if r.parent_call_id == result.call_id and r.action == "result"]
    assert len(made) == 51 and {r.outcome for r in made} == {"ok"}
