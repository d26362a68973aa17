"""Under `bastion up`: a call whose sandbox service is killed mid-call is uncertain and not
repeated; command hooks block with their reason; the audit shows a session in order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from bastion.cli.discovery import list_instances
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.journal import JournalEntry
from bastion.proto.session import OpenSession, SessionInfo
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, connect, request
from bastion.shared.codec import decode
from bastion.shared.errors import BastionError
from bastion.shared.statedir import find_bus_settings
from tests.helpers.owners import owned
from tests.helpers.running_up import BASTION, Up, bastion, start_up, stop

pytestmark = pytest.mark.e2e

REQUEST_TIMEOUT_S = "3"
"""The orchestrator's wait for a sandbox answer: short, so the uncertain call ends soon."""


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    running = start_up(tmp_path / "state", BASTION_REQUEST_TIMEOUT_S=REQUEST_TIMEOUT_S)
    try:
        yield running
    finally:
        stop(running)


async def _started_entry(client: Client) -> None:
    """Wait until the journal holds a `started` entry: the call is on its way to the sandbox."""
    kv = await client.jetstream().key_value(subjects.JOURNAL_BUCKET)
    watcher = await kv.watchall()
    try:
        async for entry in watcher:
            if entry and entry.value and decode(entry.value, JournalEntry).state == "started":
                return
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]


async def _paths_resolved(client: Client) -> None:
    """Wait until the sandbox service has answered a `resolve` (a call's paths, judged
    before the policy is asked)."""
    while True:
        answer = await client.request("$SRV.STATS.sandbox", b"", timeout=5)
        endpoints = json.loads(answer.data).get("endpoints") or []
        if any(e["name"] == "resolve" and e["processing_time"] > 0 for e in endpoints):
            return
        await anyio.sleep(0.05)


async def _sandbox_back(client: Client) -> None:
    while "sandbox" not in {i.name for i in await list_instances(client, window_s=0.3)}:
        pass


def test_killing_the_sandbox_service_mid_call_makes_the_call_uncertain_and_never_repeated(
    up: Up, tmp_path: Path
) -> None:
    """The sandbox child is frozen (SIGSTOP) so that the call is delivered to it and cannot
    finish; once the journal says the call was sent, the child is SIGKILLed: it died in the
    middle of the call, without an answer. Nothing was written, so a repeat would show."""
    workspace = owned(tmp_path / "work")
    write = ToolCall(tool="write_file", input={"path": "once.txt", "content": "x\n"})

    async def scenario() -> tuple[CallResult, CallResult, CallResult]:
        async with connect(find_bus_settings(None, up.state_dir), "e2e") as client:
            session: SessionInfo = await request(
                client,
                subjects.SESSION_OPEN,
                OpenSession(agent="e2e", workspace=str(workspace), autonomy="L3"),
                SessionInfo,
                timeout_s=30,
            )

            async def make(call: ToolCall) -> CallResult:
                try:
                    answer: CallResult = await request(
                        client, subjects.session_call(session.session_id), call, CallResult,
                        timeout_s=60,
                    )  # fmt: skip
                except BastionError as error:
                    return error.to_reply()
                return answer

            sandbox, policy = up.pids()["sandbox"], up.pids()["policy"]
            # The call's paths are resolved by the sandbox before the policy is asked: the
            # policy is held until that is done, then the sandbox is frozen before the
            # call reaches it.
            os.kill(policy, signal.SIGSTOP)
            results: list[CallResult] = []
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tasks:

                    async def first() -> None:
                        results.append(await make(write))

                    tasks.start_soon(first)
                    await _paths_resolved(client)
                    os.kill(sandbox, signal.SIGSTOP)
                    os.kill(policy, signal.SIGCONT)
                    await _started_entry(client)
                    os.kill(sandbox, signal.SIGKILL)
                await _sandbox_back(client)
            again = await make(write)
            other = await make(
                ToolCall(tool="write_file", input={"path": "once.txt", "content": "y\n"})
            )
            return results[0], again, other

    first, again, other = anyio.run(scenario)
    assert isinstance(first, ErrorReply) and first.code == "uncertain", first
    assert "got no answer" in first.message
    assert isinstance(again, ErrorReply) and again.code == "uncertain", again
    assert "an identical write_file call was made at" in again.message
    assert isinstance(other, ToolOutput), other
    assert (workspace / "once.txt").read_text() == "y\n"


def test_command_hooks_under_up_block_with_their_reason_and_the_audit_shows_the_session(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    guard = tmp_path / "guard.sh"
    guard.write_text(
        '#!/bin/sh\ngrep -q "rm " && { echo "no deleting here" >&2; exit 2; }\nexit 0\n'
    )
    guard.chmod(0o755)
    added = subprocess.run(
        [*BASTION, "hooks", "add", "--state-dir", str(state), "--event", "before-tool",
         "--tool", "shell", "--", str(guard)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    running = start_up(state, BASTION_REQUEST_TIMEOUT_S=REQUEST_TIMEOUT_S)
    try:
        assert "(and the hook runner)" in running.output[-1]
        status = json.loads(bastion("status", "-o", "json", state_dir=state).stdout)
        assert len(status["items"]) == 6 and status["missing"] == []
        workspace = owned(tmp_path / "work")
        (workspace / "keep").write_text("k")
        script = json.dumps(
            [
                {"tool": "shell", "input": {"command": "rm keep"}},
                {"tool": "shell", "input": {"command": "echo kept"}},
                {"say": "done"},
            ]
        )
        run = bastion(
            "agent", "run", "--script", "-", "--workspace", str(workspace), "--shell",
            "--autonomy", "L3", state_dir=state, stdin=script,
        )  # fmt: skip
        assert run.returncode == 1, run.stderr  # a blocked call is an error of Bastion's
        assert "1 call(s) of session" in run.stderr
        assert (
            "← error (hook_blocked): blocked by the before-tool hook commands: no deleting here"
            in run.stdout.splitlines()
        )
        assert (workspace / "keep").exists()
        session = run.stdout.split()[1]
        shown = bastion("audit", "show", session, state_dir=state)
        assert shown.returncode == 0, shown.stderr
        # The sandbox reading the tenant's values to cut them from replies is a secret read
        # of its own (`vault.redaction`), recorded when it happens: not a step of the call.
        actions = [
            line.split()[3:6]
            for line in shown.stdout.splitlines()
            if line.split()[3:5] != ["secret_read", "vault.redaction"]
        ]
        assert actions == [
            ["run_start", "-", "-"],
            ["decision", "shell", "allow"],
            ["result", "shell", "hook_blocked"],
            ["decision", "shell", "allow"],
            ["call", "shell", "-"],
            ["result", "shell", "ok"],
            ["run_end", "-", "done"],
        ]
        tail = bastion("audit", "tail", "-n", "2", "-o", "json", state_dir=state)
        assert [json.loads(line)["action"] for line in tail.stdout.splitlines()] == [
            "result",
            "run_end",
        ]
    finally:
        stop(running)
