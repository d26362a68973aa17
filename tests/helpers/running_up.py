"""`bastion up` as a subprocess for a test (started on a state dir, ready, stopped after), and
the `bastion` commands a test runs against it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bastion.cli.natsserver import free_port

__all__ = [
    "BASTION",
    "REPO",
    "SKILLS",
    "WAITING",
    "WAITS",
    "Up",
    "bastion",
    "notes_run",
    "running_up",
    "start_up",
    "stop",
]


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


REPO = Path(__file__).resolve().parents[2]
SKILLS = REPO / "examples" / "skills"
BASTION = [sys.executable, "-m", "bastion.cli"]
"""The `bastion` command, as this interpreter runs it."""


@dataclass
class Up:
    """A running `bastion up` (the `up` fixture's value): its process, state dir, and output
    up to its `ready:` line."""

    process: subprocess.Popen[str]
    state_dir: Path
    output: list[str]

    def pids(self) -> dict[str, int]:
        """The pid of each child as `bastion up` printed it."""
        found: dict[str, int] = {}
        for line in self.output:
            match = re.match(r"\s+(\w+)\s+(?:nats://\S+\s+)?pid (\d+)", line)
            if match:
                found[match.group(1)] = int(match.group(2))
        return found


def bastion(
    *args: str, state_dir: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`bastion ARGS… --state-dir STATE_DIR`, its output captured (it may fail)."""
    # Before a `--`: what follows it is a command's own arguments (`bastion mcp add … -- CMD`).
    end = args.index("--") if "--" in args else len(args)
    return subprocess.run(
        [*BASTION, *args[:end], "--state-dir", str(state_dir), *args[end:]],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


WAITS = 3
"""The exit status of a run stopped for a person (docs/cli.md#exit-statuses)."""
WAITING = re.compile(  # the line `bastion agent run` prints for a call that waits for a person
    r"^session (?P<sid>[0-9a-f]{16}): waiting for you: (?P<tool>\w+) (?P<input>\{.*\}) "
    r"\((?P<why>.*); request (?P<rid>[0-9a-f]{16})\)\. Answer with "
    r"`bastion agent continue (?P=sid) --approve`.* or `--decline <why>`\.$"
)


def notes_run(up: Up, workspace: Path, *flags: str) -> list[str]:
    """The notes transcript (`examples/notes.json`) at L2 with the example skills; its lines."""
    run = bastion(
        "agent", "run", "--script", str(REPO / "examples" / "notes.json"),
        "--workspace", str(workspace), "--skills-dir", str(SKILLS), "--autonomy", "L2",
        *flags, state_dir=up.state_dir,
    )  # fmt: skip
    assert run.returncode == WAITS, run.stdout + run.stderr
    return run.stdout.splitlines()


def start_up(state_dir: Path, **env: str) -> Up:
    """`bastion up --state-dir STATE_DIR` on a free front-door port, with none of this
    process's `BASTION_*` variables but `env`'s, once it prints `ready:`."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    process = subprocess.Popen(
        [*BASTION, "up", "--state-dir", str(state_dir), "--http-port", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment | env,
    )
    output: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line.rstrip("\n"))
        if line.startswith(("ready:", "error:")):
            break
    assert output and output[-1].startswith("ready:"), "\n".join(output)
    return Up(process, state_dir, output)


def stop(up: Up) -> None:
    """Stop a `start_up` with Ctrl-C (SIGINT), as a person would."""
    if up.process.poll() is None:
        up.process.send_signal(signal.SIGINT)
        up.process.communicate(timeout=60)
    assert up.process.stdout is not None
    up.process.stdout.close()
