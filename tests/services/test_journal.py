"""The journal: an identical non-idempotent call is answered from it, an unanswered one is
uncertain and never repeated, and shell commands are never journaled."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from nats.aio.msg import Msg

from bastion.orchestrator.journal import call_key
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.journal import JournalEntry
from bastion.proto.sandbox import ResolvedPaths, ResolvePaths, SandboxReady
from bastion.proto.toolinput import EditFileInput, WriteFileInput
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, round_trip
from bastion.shared.codec import decode, encode
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.session import call, open_session, orchestrator


@pytest.fixture
async def policy(run_service: ServiceRunner) -> AsyncIterator[None]:
    async with run_service(policy_service, PolicySettings):
        yield


@pytest.fixture
async def sandbox(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> AsyncIterator[None]:
    settings = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"))
    async with run_service(sandbox_service, settings):
        yield


@pytest.mark.usefixtures("policy", "sandbox")
async def test_an_identical_write_is_answered_from_the_journal_and_not_made_again(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        first = await call(client, session.session_id, "write_file", path="a.txt", content="one")
        (workspace / "a.txt").write_text("changed since")
        again = await call(client, session.session_id, "write_file", path="a.txt", content="one")
        other = await call(client, session.session_id, "write_file", path="a.txt", content="two")
    assert isinstance(first, ToolOutput) and isinstance(again, ToolOutput)
    head, rest = again.text.split("\n", 1)
    assert head.startswith("[answered from the journal: this exact call already ran at ")
    assert head.endswith("; it was not made again]") and rest == first.text
    assert again.decision == first.decision
    assert isinstance(other, ToolOutput) and not other.text.startswith("[answered")
    assert (workspace / "a.txt").read_text() == "two"


@pytest.mark.usefixtures("policy", "sandbox")
async def test_shell_commands_are_never_journaled_so_the_same_command_runs_twice(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        for _ in range(2):
            ran = await call(client, session.session_id, "shell", command="echo ran >> log")
            assert isinstance(ran, ToolOutput) and ran.text == "exit status 0"
    assert (workspace / "log").read_text() == "ran\nran\n"


@pytest.mark.usefixtures("policy", "sandbox")
async def test_a_call_that_failed_with_an_answer_may_be_made_again(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    edit = {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        failed = await call(client, session.session_id, "edit_file", **edit)
        (workspace / "a.py").write_text("x = 1\n")
        edited = await call(client, session.session_id, "edit_file", **edit)
    assert isinstance(failed, ErrorReply) and failed.code == "not_found"
    assert isinstance(edited, ToolOutput)
    assert (workspace / "a.py").read_text() == "x = 2\n"


@pytest.fixture
async def silent_sandbox(client: Client) -> AsyncIterator[list[Msg]]:
    """A sandbox stand-in: it checks workspaces and resolves paths (as given), and takes file
    calls without ever answering, as a sandbox service killed in the middle of a call would."""
    received: list[Msg] = []

    async def check(msg: Msg) -> None:
        await msg.respond(encode(SandboxReady(backend="bwrap", detail="stand-in")))

    async def swallow(msg: Msg) -> None:
        received.append(msg)

    async def resolve(msg: Msg) -> None:
        asked = decode(msg.data, ResolvePaths)
        await msg.respond(encode(ResolvedPaths(paths=asked.paths)))

    checks = await client.subscribe(subjects.SANDBOX_CHECK, cb=check)
    files = await client.subscribe(subjects.SANDBOX_FILES, cb=swallow)
    resolves = await client.subscribe(subjects.SANDBOX_RESOLVE, cb=resolve)
    await round_trip(client)
    yield received
    await checks.unsubscribe()
    await files.unsubscribe()
    await resolves.unsubscribe()


@pytest.mark.usefixtures("policy")
async def test_a_call_that_gets_no_answer_is_uncertain_and_never_repeated(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    silent_sandbox: list[Msg],
) -> None:
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url, request_timeout_s=0.5)
    async with run_service(orchestrator_service, settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        first = await call(client, session.session_id, "write_file", path="a.txt", content="x")
        again = await call(client, session.session_id, "write_file", path="a.txt", content="x")
    assert isinstance(first, ErrorReply) and first.code == "uncertain"
    assert "got no answer" in first.message and "may or may not have taken effect" in first.message
    assert isinstance(again, ErrorReply) and again.code == "uncertain"
    assert "an identical write_file call was made at" in again.message
    assert "make a different call" in again.message
    assert len(silent_sandbox) == 1  # the stand-in saw the call once, never a retry


@pytest.mark.usefixtures("policy")
async def test_a_call_found_started_at_call_time_is_uncertain_and_not_made(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    silent_sandbox: list[Msg],
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        # An orchestrator died after sending this call: its entry never left `started`.
        kv = await client.jetstream().key_value(subjects.JOURNAL_BUCKET)
        key = call_key(session.session_id, "write_file", WriteFileInput(path="a", content="x"))
        entry = JournalEntry(
            session_id=session.session_id,
            tool="write_file",
            call_id="c0",
            state="started",
            started_at=datetime.now(UTC),
        )
        await kv.create(key, encode(entry))
        answer = await call(client, session.session_id, "write_file", path="a", content="x")
        stored = msgspec.msgpack.decode((await kv.get(key)).value or b"", type=JournalEntry)
    assert isinstance(answer, ErrorReply) and answer.code == "uncertain"
    assert "whoever sent it stopped before an answer came" in answer.message
    assert stored.state == "uncertain"
    assert silent_sandbox == []


def test_the_journal_key_is_the_sha256_of_canonical_json_with_defaults_filled() -> None:
    given = EditFileInput(path="é.py", old_string="a", new_string="b")
    canonical = (
        '{"input":{"new_string":"b","old_string":"a","path":"é.py","replace_all":false},'
        '"session":"0123456789abcdef","tool":"edit_file"}'
    )
    expected = hashlib.sha256(canonical.encode()).hexdigest()
    assert call_key("0123456789abcdef", "edit_file", given) == expected
    assert call_key("0123456789abcdef", "edit_file", msgspec.structs.replace(given, path="b")) != (
        expected
    )


@pytest.mark.usefixtures("policy", "sandbox")
async def test_the_journal_answers_even_after_the_orchestrator_restarts(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        await call(client, session.session_id, "write_file", path="a.txt", content="one")
    (workspace / "a.txt").unlink()
    async with orchestrator(run_service, bus_settings):
        again = await call(client, session.session_id, "write_file", path="a.txt", content="one")
    assert isinstance(again, ToolOutput) and again.text.startswith("[answered from the journal")
    assert not (workspace / "a.txt").exists()
