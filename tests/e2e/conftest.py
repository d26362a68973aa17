"""Fixtures for the end-to-end tests: `bastion up` as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bastion.cli.natsserver import free_port
from tests.helpers.running_up import BASTION, Up


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    """`bastion up` on a state dir of the test's own (`tmp_path/state`), ready; stopped after."""
    state_dir = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    process = subprocess.Popen(
        [*BASTION, "up", "--state-dir", str(state_dir), "--http-port", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    output: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line.rstrip("\n"))
        if line.startswith(("ready:", "error:")):
            break
    assert output and output[-1].startswith("ready:"), "\n".join(output)
    running = Up(process, state_dir, output)
    try:
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=60)
        process.stdout.close()
