"""Cancelling under `bastion up`, each service as its own NATS user: Ctrl-C in `bastion
agent run` cancels the running command (the cancel's subjects are allowed where they must
be), and the session's record says who cancelled."""

from __future__ import annotations

import getpass
import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.owners import owned
from tests.helpers.running_up import BASTION, Up, bastion
from tests.helpers.sleepers import sleeping, unique_duration

pytestmark = pytest.mark.e2e


def _wait_for(check: Callable[[], bool], what: str) -> None:
    for _ in range(600):
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_ctrl_c_in_agent_run_cancels_the_command_under_bastion_up(up: Up, tmp_path: Path) -> None:
    duration = unique_duration()
    workspace = owned(tmp_path / "work")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool": "shell", "input": {"command": f"sleep {duration}"}}]))
    run = subprocess.Popen(
        [
            *BASTION, "agent", "run", "--script", str(script), "--workspace", str(workspace),
            "--shell", "--autonomy", "L3", "--state-dir", str(up.state_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: bool(sleeping(duration)), "the sleep started")
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    _wait_for(lambda: not sleeping(duration), "the sleep ended")
    assert run.returncode == 130, (out, err)
    by = f"cli:{getpass.getuser()}"
    assert f"← error (cancelled): this shell call was cancelled by {by}" in out
    session = out.splitlines()[0].split()[1]
    shown = bastion("audit", "show", session, "-o", "json", state_dir=up.state_dir)
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    assert {"action": "cancel", "by": by} in [
        {"action": r["action"], "by": r.get("by")} for r in records if r["action"] == "cancel"
    ]
    assert [r["outcome"] for r in records if r["action"] == "result"] == ["cancelled"]
