"""`bastion up` as a user runs it: six services, the example scripts, a crash, and Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import anyio
import pytest

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.shared.bus import connect, request
from bastion.shared.errors import BastionError
from bastion.shared.statedir import find_bus_settings
from tests.helpers.owners import owned
from tests.helpers.running_up import REPO, Up, bastion

pytestmark = pytest.mark.e2e


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive; `bastion up` reaps its children, so none should remain
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_up_brings_six_services_that_status_lists_and_a_second_up_is_refused(up: Up) -> None:
    status = bastion("status", "--wait", "30", state_dir=up.state_dir)
    assert status.returncode == 0, status.stdout + status.stderr
    for name in ("orchestrator", "policy", "sandbox", "egress", "mcp", "vault"):
        assert re.search(rf"^{name}\s", status.stdout, re.MULTILINE), status.stdout
    as_json = json.loads(bastion("status", "-o", "json", state_dir=up.state_dir).stdout)
    assert len(as_json["items"]) == 6 and as_json["missing"] == []

    second = bastion("up", state_dir=up.state_dir)
    assert second.returncode == 1
    assert "already runs on state dir" in second.stderr and "Traceback" not in second.stderr


def test_the_primes_example_prints_seventeen_primes(up: Up, tmp_path: Path) -> None:
    workspace = owned(tmp_path / "work")
    run = bastion(
        "agent", "run", "--script", str(REPO / "examples" / "primes.json"),
        "--workspace", str(workspace), "--shell", "--autonomy", "L3",
        state_dir=up.state_dir,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert re.fullmatch(r"session [0-9a-f]{16} for agent scripted", lines[0])
    assert "← wrote 117 bytes to primes.py" in lines
    assert (
        "17 primes below 60: [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59]"
        in lines
    )
    assert lines[-2].startswith("agent: There are 17 primes")
    assert re.fullmatch(r"session [0-9a-f]{16}: done", lines[-1])


def test_the_sandbox_example_shows_uid_10001_no_root_a_read_only_system_and_no_network(
    up: Up, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    script = (REPO / "examples" / "sandbox.json").read_text()
    run = bastion(
        "agent", "run", "--script", "-", "--workspace", str(workspace), "--shell",
        "--autonomy", "L3", state_dir=up.state_dir, stdin=script,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "uid=10001(sandbox) gid=10001(sandbox)" in out
    assert "home=/workspace" in out
    assert "/root" in out and "No such file or directory" in out
    assert "Read-only file system" in out
    assert re.search(r"URLError|Errno|unreachable|resolution", out), out
    assert (workspace / "made.txt").read_text() == "hello\n"


def test_killing_the_orchestrator_keeps_an_open_session_usable(up: Up, tmp_path: Path) -> None:
    workspace = owned(tmp_path / "work")

    async def scenario() -> tuple[SessionInfo, CallResult]:
        async with connect(find_bus_settings(None, up.state_dir), "e2e") as client:
            session: SessionInfo = await request(
                client,
                subjects.SESSION_OPEN,
                OpenSession(agent="e2e", workspace=str(workspace), shell=True, autonomy="L3"),
                SessionInfo,
                timeout_s=30,
            )
            os.kill(up.pids()["orchestrator"], signal.SIGKILL)
            # `bastion up` restarts it; the session is read back from JetStream.
            with anyio.fail_after(60):
                while True:
                    try:
                        again: SessionInfo = await request(
                            client,
                            subjects.SESSION_GET,
                            SessionRef(session_id=session.session_id),
                            SessionInfo,
                            timeout_s=2,
                        )
                        break
                    except BastionError:
                        await anyio.sleep(0.2)
            result: CallResult = await request(
                client,
                subjects.session_call(session.session_id),
                ToolCall(tool="shell", input={"command": "echo still here"}),
                CallResult,
                timeout_s=60,
            )
            assert again.session_id == session.session_id and again.state == "open"
            return session, result

    _, result = anyio.run(scenario)
    assert isinstance(result, ToolOutput) and "still here" in result.text
    assert any("orchestrator exited" in line for line in _stop_and_read_output(up))


def _stop_and_read_output(up: Up) -> list[str]:
    """What `bastion up` printed so far (its supervisor notes a restart)."""
    up.process.send_signal(signal.SIGINT)
    rest, _ = up.process.communicate(timeout=60)
    return up.output + rest.splitlines()


def test_ctrl_c_stops_every_process_it_started(up: Up) -> None:
    children = up.pids()
    assert set(children) == {"nats", "orchestrator", "policy", "sandbox", "egress", "mcp", "vault"}
    up.process.send_signal(signal.SIGINT)
    rest, _ = up.process.communicate(timeout=60)
    assert up.process.returncode == 0
    assert rest.strip().endswith("stopped")
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [name for name, pid in children.items() if alive(pid)]
    assert not (up.state_dir / "run" / "up.json").exists()


def test_up_writes_a_private_http_token_and_refuses_a_front_door_port_in_use(
    up: Up, tmp_path: Path
) -> None:
    tokens = up.state_dir / "http-tokens"
    [line] = [o for o in up.output if o.startswith("front door: ")]
    assert re.fullmatch(rf"front door: http://127\.0\.0\.1:\d+ \(token in {tokens}\)", line)
    assert tokens.stat().st_mode & 0o777 == 0o600
    assert re.fullmatch(r"local:[A-Za-z0-9_-]{40,}\n", tokens.read_text())
    taken = re.search(r":(\d+) ", line)
    assert taken is not None
    second = bastion("up", "--http-port", taken.group(1), state_dir=tmp_path / "other")
    assert second.returncode == 1
    assert f"port {taken.group(1)} is already in use" in second.stderr
    assert "--http-port" in second.stderr and "Traceback" not in second.stderr
