"""What `bastion agent run`, `agent continue`, `audit show`, `status` and `proto schema` say,
and with which exit status, against a running `bastion up`: every message says what to do,
and no traceback reaches a user."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from bastion.cli.natsserver import free_port
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalAnswer, ApprovalAnswered, ApprovalList, ApprovalQuery
from bastion.shared.bus import connect, request
from bastion.shared.statedir import find_bus_settings
from tests.helpers.running_up import BASTION, bastion, running_up

pytestmark = pytest.mark.e2e

OWNER = 1000
MB = 1024 * 1024


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One `bastion up` for the module's tests (each has its own sessions)."""
    with running_up(tmp_path_factory.mktemp("answers") / "state") as state:
        yield state


def writable_workspace_in(tmp_path: Path) -> Path:
    """A workspace of an unprivileged owner that any sandbox user may write."""
    path = tmp_path / "work"
    path.mkdir()
    os.chown(path, OWNER, OWNER)
    path.chmod(0o777)
    return path


def script(tmp_path: Path, steps: list[dict[str, object]]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(steps))
    return str(path)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-2000:]


def test_a_fifty_megabyte_write_is_refused_naming_the_limit_and_the_session_goes_on(
    state_dir: Path, tmp_path: Path
) -> None:
    work = writable_workspace_in(tmp_path)
    steps: list[dict[str, object]] = [
        {"tool": "write_file", "input": {"path": "big.txt", "content": "x" * (50 * MB)}},
        {"tool": "write_file", "input": {"path": "small.txt", "content": "fits\n"}},
    ]
    run = bastion(
        "agent", "run", "--script", script(tmp_path, steps), "--workspace", str(work),
        "--autonomy", "L3", state_dir=state_dir,
    )  # fmt: skip
    no_traceback(run)
    assert run.returncode == 1, run.stderr
    assert len(run.stdout) < 20_000  # a preview of the input, not 50 MB of it
    assert "more characters not shown" in run.stdout
    assert "more than the 8388608 bytes the bus carries in one message" in run.stdout
    assert "write a large file in parts" in run.stdout
    assert (work / "small.txt").read_text() == "fits\n"
    assert not (work / "big.txt").exists()
    assert re.search(r"session [0-9a-f]{16}: done", run.stdout)
    assert "1 call(s) of session" in run.stderr


@pytest.mark.parametrize(
    ("flags", "steps", "status", "words"),
    [
        ([], [{"tool": "read_file", "input": {"path": "a.txt"}}], 0, "1\thello"),
        (["--shell"], [{"tool": "shell", "input": {"command": "exit 3"}}], 0, "exit status 3"),
        ([], [{"tool": "nope", "input": {}}], 1, "has no tool 'nope'"),
        ([], [{"tool": "read_file", "input": {"wrong": 1}}], 1, "is not valid"),
        (
            [],
            [{"tool": "shell", "input": {"command": "true"}}],
            1,
            "the session was opened without a shell: open one with --shell",
        ),
    ],
)
def test_agent_run_exits_one_when_a_step_ends_in_an_error_of_bastions(
    state_dir: Path,
    tmp_path: Path,
    flags: list[str],
    steps: list[dict[str, object]],
    status: int,
    words: str,
) -> None:
    work = writable_workspace_in(tmp_path)
    (work / "a.txt").write_text("hello\n")
    (work / "a.txt").chmod(0o666)
    run = bastion(
        "agent", "run", "--script", script(tmp_path, steps), "--workspace", str(work),
        "--autonomy", "L3", *flags, state_dir=state_dir,
    )  # fmt: skip
    no_traceback(run)
    assert run.returncode == status, run.stdout + run.stderr
    assert words in run.stdout


def test_a_shell_without_a_workspace_names_both_flags(state_dir: Path, tmp_path: Path) -> None:
    steps: list[dict[str, object]] = [{"tool": "shell", "input": {"command": "true"}}]
    run = bastion("agent", "run", "--script", script(tmp_path, steps), state_dir=state_dir)
    assert run.returncode == 1
    assert "open the session with --workspace DIR --shell" in run.stdout


def test_bad_usage_exits_two(state_dir: Path, tmp_path: Path) -> None:
    missing = bastion("agent", "run", "--script", str(tmp_path / "none.json"), state_dir=state_dir)
    assert missing.returncode == 2 and "cannot read the script" in missing.stderr
    flag = bastion("agent", "run", "--no-such-flag", state_dir=state_dir)
    assert flag.returncode == 2


def test_a_session_id_that_is_not_one_or_is_unknown_is_said_plainly(state_dir: Path) -> None:
    malformed = bastion("agent", "continue", "not-a-session", "--approve", state_dir=state_dir)
    no_traceback(malformed)
    assert malformed.returncode == 2
    assert "'not-a-session' is not a session id: give the 16 lowercase hex digits" in (
        malformed.stderr
    )
    assert "^[0-9a-f]" not in malformed.stderr
    unknown = bastion("agent", "continue", "0123456789abcdef", "--approve", state_dir=state_dir)
    no_traceback(unknown)
    assert unknown.returncode == 1
    assert "there is no session 0123456789abcdef: check the id" in unknown.stderr
    assert "bastion session open" not in unknown.stderr


def test_audit_show_of_an_unknown_session_says_so_and_exits_one(state_dir: Path) -> None:
    shown = bastion("audit", "show", "0123456789abcdef", state_dir=state_dir)
    assert shown.returncode == 1
    assert "the audit log has no record of session 0123456789abcdef: check the id" in (shown.stderr)


@pytest.mark.parametrize("kind", ["schema", "agent run"])
def test_output_piped_into_head_ends_without_a_traceback(
    state_dir: Path, tmp_path: Path, kind: str
) -> None:
    if kind == "schema":
        command = [*BASTION, "proto", "schema"]  # some 160 KB: more than a pipe holds
    else:
        work = writable_workspace_in(tmp_path)
        (work / "a.txt").write_text("line of text\n" * 300)
        (work / "a.txt").chmod(0o666)
        steps: list[dict[str, object]] = [{"tool": "read_file", "input": {"path": "a.txt"}}] * 40
        command = [
            *BASTION, "agent", "run", "--script", script(tmp_path, steps), "--workspace",
            str(work), "--autonomy", "L3", "--state-dir", str(state_dir),
        ]  # fmt: skip
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout is not None and writer.stderr is not None
    writer.stdout.readline()
    writer.stdout.close()  # what `head -1` does once it has its line
    stderr = writer.stderr.read().decode()
    writer.stderr.close()
    assert writer.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_a_fetch_of_loopback_names_the_setting_that_allows_a_range(
    state_dir: Path, tmp_path: Path
) -> None:
    steps: list[dict[str, object]] = [
        {"tool": "fetch_url", "input": {"url": "http://127.0.0.1:9/"}}
    ]
    run = bastion(
        "agent", "run", "--script", script(tmp_path, steps), "--web", "--autonomy", "L5",
        state_dir=state_dir,
    )  # fmt: skip
    assert run.returncode == 1
    assert "loopback address 127.0.0.1" in run.stdout
    assert "BASTION_EGRESS_ALLOW_RANGES" in run.stdout


def test_a_timeout_says_its_limit_and_a_longer_timeout_s_is_said_to_be_lowered(
    state_dir: Path, tmp_path: Path
) -> None:
    work = writable_workspace_in(tmp_path)
    steps: list[dict[str, object]] = [
        {"tool": "shell", "input": {"command": "sleep 30", "timeout_s": 300}},
    ]
    run = bastion(
        "agent", "run", "--script", script(tmp_path, steps), "--workspace", str(work), "--shell",
        "--autonomy", "L3", "--sandbox-timeout", "1", state_dir=state_dir,
    )  # fmt: skip
    no_traceback(run)
    assert "[timeout_s 300 is more than this session's wall-clock limit of 1 s" in run.stdout
    assert "--sandbox-timeout SECONDS" in run.stdout
    assert "timed out: the wall-clock limit of 1 s ran out" in run.stdout


async def _approve_elsewhere(state_dir: Path, session_id: str) -> None:
    async with connect(find_bus_settings(None, state_dir, env={}), "elsewhere") as client:
        listed = await request(
            client, subjects.APPROVALS_LIST, ApprovalQuery(session_id=session_id), ApprovalList,
            timeout_s=30,
        )  # fmt: skip
        (parked,) = listed.approvals
        answer = ApprovalAnswer(request_id=parked.request_id, approve=True, by="http:someone")
        await request(client, subjects.APPROVALS_ANSWER, answer, ApprovalAnswered, timeout_s=60)


def test_continue_carries_on_a_script_whose_call_was_answered_elsewhere(
    state_dir: Path, tmp_path: Path
) -> None:
    work = writable_workspace_in(tmp_path)
    steps: list[dict[str, object]] = [
        {"tool": "write_file", "input": {"path": "a.txt", "content": "approved\n"}},
        {"tool": "read_file", "input": {"path": "a.txt"}},
    ]
    run = bastion(
        "agent", "run", "--script", script(tmp_path, steps), "--workspace", str(work),
        "--autonomy", "L2", state_dir=state_dir,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr  # waits for a person
    sid = re.search(r"session ([0-9a-f]{16}): waiting for you", run.stdout)
    assert sid, run.stdout
    anyio.run(_approve_elsewhere, state_dir, sid[1])
    carried = bastion("agent", "continue", sid[1], "--approve", state_dir=state_dir)
    no_traceback(carried)
    assert carried.returncode == 0, carried.stdout + carried.stderr
    assert "already answered by http:someone: done; this answer changes nothing" in carried.stdout
    assert "1\tapproved" in carried.stdout
    assert carried.stdout.splitlines()[-1] == f"session {sid[1]}: done"


def test_status_wait_started_before_up_waits_for_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    status = subprocess.Popen(
        [*BASTION, "status", "--wait", "120", "--state-dir", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    # Nothing runs on the state dir yet (no run record, no NATS): `up` starts only once the
    # status command has had time to look and find nothing.
    time.sleep(3)
    up = subprocess.Popen(
        [*BASTION, "up", "--state-dir", str(state), "--http-port", str(free_port())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        out, err = status.communicate(timeout=150)
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert status.returncode == 0, out + err
    assert "missing" not in out


def test_agent_run_and_continue_with_o_json_print_one_record_and_the_transcript_on_stderr(
    state_dir: Path, tmp_path: Path
) -> None:
    work = writable_workspace_in(tmp_path)
    (work / "a.txt").write_text("hello\n")
    (work / "a.txt").chmod(0o666)
    steps: list[dict[str, object]] = [
        {"tool": "read_file", "input": {"path": "a.txt"}},
        {"tool": "write_file", "input": {"path": "b.txt", "content": "b\n"}},
        {"say": "wrote b"},
    ]
    run = bastion(
        "agent", "run", "--script", script(tmp_path, steps), "--workspace", str(work),
        "--autonomy", "L2", "-o", "json", state_dir=state_dir,
    )  # fmt: skip
    no_traceback(run)
    assert run.returncode == 3, run.stderr
    record = json.loads(run.stdout)
    assert record["status"] == 3 and "waiting for you" in run.stderr
    assert [item["tool"] for item in record["items"]] == ["read_file"]
    assert "1\thello" in record["items"][0]["result"]["text"]
    assert record["waiting"]["tool"] == "write_file"
    assert record["waiting"]["session_id"] == record["session_id"]

    carried = bastion(
        "agent", "continue", record["session_id"], "--approve", "-o", "json",
        state_dir=state_dir,
    )  # fmt: skip
    no_traceback(carried)
    assert carried.returncode == 0, carried.stderr
    after = json.loads(carried.stdout)
    assert after["status"] == 0 and after["waiting"] is None
    assert after["items"][0]["tool"] == "write_file"
    assert after["items"][0]["answered_by"].startswith("cli:")
    assert after["items"][-1] == {"say": "wrote b"}
    assert carried.stderr.splitlines()[-1] == f"session {record['session_id']}: done"
    assert (work / "b.txt").read_text() == "b\n"
