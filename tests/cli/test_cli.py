"""The `bastion` command facing bad input or no running system: a sentence, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bastion.cli.up import StopSignal, sockets_dir_of

BASTION = [sys.executable, "-m", "bastion.cli"]


def bastion(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BASTION, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("not json", "is not JSON"),
        ('{"tool": "shell"}', "must be a JSON array of steps"),
        ("[]", "has no steps"),
        ('[{"tool": "shell", "say": "hi"}]', 'exactly one of "tool" and "say"'),
        ('[{"say": "hi"}, {"tool": "shell"}]', 'only the last step may be a "say"'),
        ('[{"tool": "shell", "inputs": {}}]', "step 1"),
    ],
)
def test_a_bad_script_is_refused_before_anything_runs_naming_what_is_wrong(
    tmp_path: Path, script: str, words: str
) -> None:
    result = bastion("agent", "run", "--script", "-", "--state-dir", str(tmp_path), stdin=script)
    assert result.returncode == 2
    assert words in result.stderr
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_a_script_file_that_does_not_exist_is_named(tmp_path: Path) -> None:
    result = bastion("agent", "run", "--script", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert "cannot read the script" in result.stderr and "nope.json" in result.stderr


def test_commands_with_no_running_bastion_say_how_to_start_one(tmp_path: Path) -> None:
    status = bastion("status", "--state-dir", str(tmp_path))
    run = bastion(
        "agent", "run", "--script", "-", "--state-dir", str(tmp_path),
        stdin='[{"say": "hi"}]',
    )  # fmt: skip
    for result in (status, run):
        assert result.returncode == 1
        assert "no running Bastion found" in result.stderr and "bastion up" in result.stderr
        assert "Traceback" not in result.stderr


def test_a_nats_url_where_nothing_listens_is_reported_not_raised(tmp_path: Path) -> None:
    result = bastion("status", "--nats", "nats://127.0.0.1:9")
    assert result.returncode == 1
    assert "cannot reach NATS at nats://127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr


def test_proto_schema_writes_one_json_schema_per_message(tmp_path: Path) -> None:
    result = bastion("proto", "schema", "--out", str(tmp_path / "schema"))
    assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in (tmp_path / "schema").iterdir())
    assert "ToolCall.json" in files and "ExecResult.json" in files and "ErrorReply.json" in files
    tool_call = json.loads((tmp_path / "schema" / "ToolCall.json").read_text())
    assert "ToolCall" in tool_call["$defs"]
    whole = json.loads(bastion("proto", "schema").stdout)
    assert set(whole) == {name.removesuffix(".json") for name in files}


def test_a_workspace_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    result = bastion(
        "agent", "run", "--script", "-", "--workspace", str(tmp_path / "missing"),
        stdin='[{"say": "hi"}]',
    )  # fmt: skip
    assert result.returncode == 2
    assert "is not a directory" in result.stderr


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ("bogus=1", "NAME=VALUE with NAME one of: wall_s, cpu_s"),
        ("cpu_s=1g", "cpu_s=1g is not a number"),
        ("output_bytes=10", "a sandbox limit is out of bounds"),
    ],
)
def test_a_sandbox_limit_that_is_not_one_or_out_of_bounds_is_refused(flag: str, words: str) -> None:
    result = bastion(
        "agent", "run", "--script", "-", "--sandbox-limit", flag, stdin='[{"say": "hi"}]'
    )
    assert result.returncode == 2
    assert words in result.stderr and "Traceback" not in result.stderr


def test_a_root_bastion_up_puts_the_egress_sockets_where_the_sandboxs_user_reaches_them(
    tmp_path: Path,
) -> None:
    """A root `bastion up` runs sandboxes as an unprivileged host user, whose bubblewrap must
    reach the egress socket: a state dir behind a directory only root may pass (the default
    under /root) has its sockets in /run/bastion/<digest>, 0711, root's."""
    if os.geteuid() != 0:
        pytest.skip("the sockets' place differs only for a root bastion up: run as root")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    state_dir = private / "state"
    state_dir.mkdir()
    sockets = sockets_dir_of(state_dir)
    try:
        assert sockets.parent == Path("/run/bastion")
        for directory in (sockets.parent, sockets):
            info = directory.stat()
            assert info.st_uid == 0
            assert stat.S_IMODE(info.st_mode) == 0o711
        assert sockets_dir_of(state_dir) == sockets  # the same place every time
        open_state = tmp_path / "open-state"
        open_state.mkdir()
        for each in (open_state, *open_state.parents):
            each.chmod(each.stat().st_mode | 0o001)
        assert sockets_dir_of(open_state) == open_state / "run"
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


@pytest.mark.timeout(30, method="thread")  # a deadlock takes no signal: end the run
def test_a_stop_asked_by_a_signal_never_deadlocks_bastion_up_waiting_for_it() -> None:
    """`bastion up` once hung for ever on Ctrl-C: its handler set a `threading.Event` while
    the main thread was inside that Event's `wait`, holding its lock. Signals landing in
    the middle of many waits must each be taken, and the last one seen."""
    stop = StopSignal()
    taken = []

    def handler(_signum: int, _frame: object) -> None:
        taken.append(1)
        stop.set()

    previous = signal.signal(signal.SIGUSR1, handler)
    done = threading.Event()

    def send() -> None:
        for _ in range(500):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.0002)
        done.set()

    sender = threading.Thread(target=send)
    try:
        sender.start()
        while not done.is_set():
            stop.wait(0.0005)
        sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert stop.is_set()
    assert len(taken) >= 1
