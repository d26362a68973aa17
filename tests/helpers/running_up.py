"""`bastion up` as a subprocess for a test: started on a state dir, ready, stopped after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from bastion.shared.natsserver import free_port

__all__ = ["running_up"]


@contextmanager
def running_up(state_dir: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[Path]:
    """`bastion up --state-dir STATE_DIR ARGS…` on a free front-door port, with none of this
    process's `BASTION_*` variables but `env`'s; yields the state dir once every service
    answers, and stops it with Ctrl-C (SIGINT) on exit."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    environment |= dict(env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "bastion.cli", "up", "--state-dir", str(state_dir), *args,
         "--http-port", str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        output = []
        for line in process.stdout:
            output.append(line)
            if line.startswith(("ready:", "error:")):
                break
        assert output and output[-1].startswith("ready:"), "".join(output)
        yield state_dir
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
