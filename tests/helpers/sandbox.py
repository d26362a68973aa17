"""A sandbox service from a test's side: run a command, read and write a file, and check the
host afterwards."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, ExecResult, FileResult, ReadFile, WriteFile
from bastion.proto.toolinput import ReadFileInput, WriteFileInput
from bastion.shared.bus import Client, request
from bastion.shared.sandboxing.cgroup import cgroup_prefix

__all__ = [
    "CANARY",
    "HELD",
    "SECRET",
    "SECRET_ENV",
    "SESSION",
    "Host",
    "exists",
    "host_bytes",
    "in_sandbox_cgroups",
    "read",
    "run_as_tenant",
    "service_pid",
    "shell",
    "wait_for_file",
    "write",
]

SESSION = "0123456789abcdef"
CANARY = "the host's own words\n"
SECRET_ENV = "BASTION_ATTACK_SECRET"
"""A variable of the service's environment, set to `SECRET`, that no command may see."""
SECRET = "hunter2-attack"


def in_sandbox_cgroups() -> list[int]:
    """Pids of processes in a sandbox cgroup of this test run's sandbox service (it runs in
    this process): none once every call has ended. Other runs on the machine are not ours."""
    ours = "/" + cgroup_prefix()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if ours in (entry / "cgroup").read_text():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@dataclass
class Host:
    """The host as a test leaves it: a canary beside the workspace, and what else is there."""

    root: Path
    workspace: Path
    state_dir: Path
    canary: Path
    before: frozenset[str]

    def listing(self) -> frozenset[str]:
        skip = (self.workspace, self.root / "nats")
        return frozenset(
            str(path.relative_to(self.root))
            for path in self.root.rglob("*")
            if not any(path == s or path.is_relative_to(s) for s in skip)
        )

    def assert_unchanged(self, *, cgroups: bool = True) -> None:
        """The canary reads as written, nothing appeared or went outside the workspace, and
        (with `cgroups`, for bubblewrap) no sandbox process is left."""
        assert self.canary.read_text() == CANARY
        assert self.listing() == self.before
        if cgroups:
            assert in_sandbox_cgroups() == []


async def shell(
    client: Client, workspace: Path, command: str, session: str = SESSION, **fields: object
) -> ExecResult:
    """Run `command` in the sandbox, as a session's shell call would."""
    message = ExecRequest(
        session_id=session,
        workspace=str(workspace),
        command=command,
        **fields,  # type: ignore[arg-type]
    )
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, message, ExecResult, timeout_s=60
    )
    return result


async def read(client: Client, workspace: Path, path: str) -> str:
    message = ReadFile(session_id=SESSION, workspace=str(workspace), input=ReadFileInput(path=path))
    result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    return str(result.text)


async def write(client: Client, workspace: Path, path: str, content: str) -> str:
    message = WriteFile(
        session_id=SESSION,
        workspace=str(workspace),
        input=WriteFileInput(path=path, content=content),
    )
    result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    return str(result.text)


def exists(path: str) -> bool:
    """Whether `path` exists on the host (a plain call, for async tests to make)."""
    return os.path.lexists(path)


def host_bytes(path: str) -> bytes:
    """A host file's bytes, to compare before and after an attack."""
    return Path(path).read_bytes()


def wait_for_file(path: Path, deadline_s: float) -> None:
    """Poll until `path` exists (a command inside says it got there), failing at the deadline."""
    limit = time.monotonic() + deadline_s
    while not path.exists():
        if time.monotonic() > limit:
            raise TimeoutError(f"{path} did not appear within {deadline_s} s")
        time.sleep(0.01)


def service_pid() -> int:
    """The sandbox service runs in the test's own process."""
    return os.getpid()


# Runs until the test touches `go` in its workspace (or 20 s pass), after saying `started`.
HELD = "touch started; i=0; while [ ! -e go ] && [ $i -lt 2000 ]; do i=$((i+1)); sleep 0.01; done"


async def run_as_tenant(client: Client, where: Path, command: str, tenant: str) -> ExecResult:
    message = ExecRequest(session_id=SESSION, workspace=str(where), command=command, tenant=tenant)
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, message, ExecResult, timeout_s=30
    )
    return result
