"""Breaking out through git: control files a command or a file tool plants in the workspace
run later on the host, when a person or an operator's hook runs git there.

Each test plants what git would run (a `core.fsmonitor` that touches a file, a hook), then
runs git on the host as a person would and as a command hook does (the hook runner's code
path, with its locked-down environment), and checks that nothing ran. The workspace and
all in it belong to uid 1000; host git runs as root (as the incident's hook did), told the
repository is safe (`safe.directory`) so that it reads the repository's files at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import anyio
import msgspec
import pytest

from bastion.cli.hookrun import run_command
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import ApplyPatch, EditFile, ExecResult, FileResult, WriteFile
from bastion.sandbox.service import SandboxSettings, sandbox_service
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from tests.attacks.conftest import SESSION, Host, shell
from tests.conftest import ServiceRunner

OWNER: Final = 1000
SWAPPER: Final = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
swaps = 0
while not os.path.exists("stop-swapping"):
    for _ in range(200):
        # renameat2(AT_FDCWD, ".git", AT_FDCWD, "evil", RENAME_EXCHANGE)
        if libc.renameat2(-100, b".git", -100, b"evil", 2) == 0:
            swaps += 1
if swaps % 2:
    libc.renameat2(-100, b".git", -100, b"evil", 2)
    swaps += 1
print(swaps)
"""


def _own(path: Path) -> None:
    """`path` and all under it the unprivileged owner's, as a workspace is."""
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.chown(Path(root) / name, OWNER, OWNER, follow_symlinks=False)
    os.chown(path, OWNER, OWNER)


def _git(workspace: Path, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Git on the host as a person runs it, with no config of their own."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home or "/nonexistent"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "person",
        "GIT_AUTHOR_EMAIL": "person@example.org",
        "GIT_COMMITTER_NAME": "person",
        "GIT_COMMITTER_EMAIL": "person@example.org",
    }
    return subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _repo(workspace: Path) -> None:
    """A repository with one commit, as the owner made it."""
    _own(workspace)
    for args in (("init", "-q"), ("commit", "-q", "--allow-empty", "-m", "first")):
        done = _git(workspace, *args)
        assert done.returncode == 0, done.stderr


def _planted(mark: Path) -> str:
    """What a planted setting runs: it leaves `mark` (a host path no sandbox has)."""
    return f"touch {mark}"


async def _host_git_runs_nothing(workspace: Path, mark: Path, *, home: Path | None = None) -> None:
    """`git status` and `git commit` on the host, by a person and by a hook, ran nothing."""
    _own(workspace)
    _git(workspace, "status", home=home)
    _git(workspace, "commit", "-q", "--allow-empty", "-m", "person", home=home)
    hook = ["git", "-c", "safe.directory=*"]
    event = {"event": "after-tool", "session": SESSION}
    for args in (["status"], ["-c", "user.name=h", "-c", "user.email=h@h", "commit", "-qm", "h"]):
        ran = await run_command([*hook, *args], event, str(workspace), 30)
        assert ran.failure == ""
    assert not mark.exists(), "something planted in the workspace ran on the host"


# --- finding 2: the protection resolves no host path twice -----------------------------


class _Swapper:
    """A host process swapping `.git` and `evil` in the workspace until stopped."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.process = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(workspace)], stdout=subprocess.PIPE, text=True
        )

    def stop(self) -> int:
        """Stop it (`.git` back in place); how many swaps it made."""
        stop = self.workspace / "stop-swapping"
        stop.touch()
        out, _ = self.process.communicate(timeout=60)
        stop.unlink()
        return int(out)


@pytest.fixture
def swapper(host: Host) -> Iterator[_Swapper]:
    """A repository and, beside it, `evil`: a look-alike whose config and hooks are links to
    the state directory's secret (the vault's key, say); a host process swaps the two
    without end, as a second session on the workspace would try to."""
    workspace = host.workspace
    _repo(workspace)
    evil = workspace / "evil"
    evil.mkdir()
    (evil / "HEAD").write_text("ref: refs/heads/main\n")
    (evil / "config").symlink_to(host.state_dir / "sessions.key")
    (evil / "hooks").symlink_to(host.state_dir)
    _own(workspace)
    running = _Swapper(workspace)
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.stop()


async def test_swapping_dot_git_while_sandboxes_start_never_shows_a_host_file(
    client: Client, sandbox: None, host: Host, swapper: _Swapper
) -> None:
    workspace = host.workspace
    seen: list[ExecResult] = []
    refused: list[str] = []

    async def one(number: int) -> None:
        try:
            result = await shell(
                client, workspace, "cat .git/config; ls .git/hooks", session=f"{number:016x}"
            )
        except RemoteError as error:
            refused.append(f"{error.code}: {error.message}")
            return
        seen.append(result)

    for _ in range(6):
        async with anyio.create_task_group() as group:
            for number in range(8):
                group.start_soon(one, number)
    swaps = swapper.stop()
    assert swaps >= 3000, f"only {swaps} swaps: the race did not run throughout"
    config = (workspace / ".git/config").read_text()
    ran = [result.stdout for result in seen if not result.stderr.startswith("bwrap:")]
    assert len(ran) + len(refused) > 10
    for result in seen:
        assert "state secret" not in result.stdout + result.stderr
        assert "sessions.key" not in result.stdout + result.stderr
        if result.stderr.startswith("bwrap:"):
            # bwrap checks that what it mounted is the descriptor's file: a mount point
            # moved by the swap stops the sandbox before the command runs
            assert result.stdout == ""
    assert ran, "no sandbox started at all"
    assert any(stdout.startswith(config) for stdout in ran)  # the repository's own
    for stdout in ran:
        # else the look-alike's own links, dangling inside: the swapper (a host process)
        # had moved the dentry the protection was mounted on
        assert stdout.startswith(config) or stdout == ".git/hooks\n", stdout
    for reason in refused:  # `evil` was `.git` as the run started: refused, saying why
        assert reason.startswith(codes.INVALID_INPUT), reason
        assert "is a symbolic link" in reason
