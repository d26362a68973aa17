"""What every attack needs: a running sandbox service, a way in, and a host to check after."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, ExecResult, FileResult, ReadFile, WriteFile
from bastion.sandbox.service import SandboxSettings, sandbox_service
from bastion.shared.bus import Client, request

# The Docker fixtures, for the Docker containment suite: they skip saying why when no engine
# answers or the test image is not built.
from bastion.shared.sandboxing.cgroup import cgroup_prefix
from bastion.shared.settings import BusSettings
from tests.conftest import ServiceRunner
from tests.docker.conftest import backend_name, engine, image_id, owner  # noqa: F401
from tests.helpers.owners import owned

SESSION = "0123456789abcdef"
CANARY = "the host's own words\n"
SECRET_ENV = "BASTION_ATTACK_SECRET"
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


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    workspace = owned(tmp_path / "workspace")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "sessions.key").write_text("state secret\n")
    canary = tmp_path / "outside.txt"
    canary.write_text(CANARY)
    made = Host(tmp_path, workspace, state_dir, canary, frozenset())
    made.before = made.listing()
    yield made
    made.assert_unchanged()


@pytest.fixture
def settings(bus_settings: BusSettings, host: Host) -> SandboxSettings:
    return SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(host.state_dir))


@pytest.fixture
async def sandbox(
    run_service: ServiceRunner, settings: SandboxSettings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    async with run_service(sandbox_service, settings):
        yield


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
    message = ReadFile(session_id=SESSION, workspace=str(workspace), path=path)
    result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    return str(result.text)


async def write(client: Client, workspace: Path, path: str, content: str) -> str:
    message = WriteFile(session_id=SESSION, workspace=str(workspace), path=path, content=content)
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
