"""The sandbox's host user is never root, and a command sees little of the host.

Finding 1: bubblewrap started by a root service mapped the sandbox to host root, so a
command left root-owned (and setuid-root) files in the workspace and read root-only files
a bind showed. Now a root service drops to the workspace's owner (or the operator's
`BASTION_SANDBOX_HOST_UID`) before bwrap, refuses a root-owned workspace, and the file
tools give what they write to that same user. A service that is not root runs bwrap as
itself: one test runs the backend under `setpriv --reuid 1000` to show it.

Finding 11: no bwrap process is inside the sandbox to trace or read (its command line
named host paths), and the kernel keyrings' listings are masked.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from bastion.mcp.gateway.upstream.errors import UpstreamUnreachable
from bastion.mcp.gateway.upstream.launch import launching
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.mcp import McpServerSpec
from bastion.proto.sandbox import (
    ApplyPatch,
    EditFile,
    FileResult,
    SandboxCheck,
    SandboxReady,
    WriteSkill,
)
from bastion.proto.toolinput import ApplyPatchInput, EditFileInput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import OWNER_GID, OWNER_UID, owned
from tests.helpers.sandbox import SESSION, shell, write

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these attacks need a root service")

OTHER = 2000
"""An operator's dedicated sandbox user, apart from the workspace's owner."""
SETUID_SHELL = "cp /bin/sh sh-copy && chmod u+s,g+s sh-copy"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def settings(bus_settings: BusSettings, state_dir: Path) -> SandboxSettings:
    return SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(state_dir))


@pytest.fixture
async def sandbox(run_service: ServiceRunner, settings: SandboxSettings) -> AsyncIterator[None]:
    async with run_service(sandbox_service, settings):
        yield


def owner_of(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid


# --- finding 1: the host user ------------------------------------------------------------


async def test_what_a_command_makes_belongs_to_the_workspace_owner_and_no_setuid_is_root(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(client, workspace, f"mkdir d && touch d/made && {SETUID_SHELL}")
    assert result.exit_status == 0, result.stderr
    for made in (workspace / "d", workspace / "d" / "made", workspace / "sh-copy"):
        assert owner_of(made) == (OWNER_UID, OWNER_GID)
    copy = (workspace / "sh-copy").stat()
    assert copy.st_mode & stat.S_ISUID  # it may set the bit, for its own uid only
    assert copy.st_uid != 0
    assert copy.st_gid != 0


async def test_a_root_only_file_a_read_only_dir_shows_stays_unreadable(
    client: Client, sandbox: None, workspace: Path, tmp_path: Path
) -> None:
    shown = tmp_path / "shown"
    shown.mkdir(mode=0o755)
    (shown / "root-only").write_text("root's secret\n")
    (shown / "root-only").chmod(0o600)
    (shown / "public").write_text("anyone's\n")
    result = await shell(
        client,
        workspace,
        f"cat {shown}/public; cat {shown}/root-only",
        read_only_dirs=(str(shown),),
    )
    assert result.stdout == "anyone's\n"
    assert "Permission denied" in result.stderr
    assert "root's secret" not in result.stdout


async def test_a_root_owned_workspace_is_refused_at_opening_saying_what_to_do(
    client: Client, sandbox: None, tmp_path: Path
) -> None:
    root_owned = tmp_path / "root-owned"
    root_owned.mkdir()
    with pytest.raises(RemoteError) as raised:
        await request(
            client,
            subjects.SANDBOX_CHECK,
            SandboxCheck(workspace=str(root_owned)),
            SandboxReady,
            timeout_s=30,
        )
    assert raised.value.code == codes.SANDBOX_FAILED
    assert "never runs a sandbox as host root" in raised.value.message
    assert f"chown -R 1000:1000 {root_owned}" in raised.value.message
    with pytest.raises(RemoteError) as ran:
        await shell(client, root_owned, "touch made")
    assert ran.value.code == codes.SANDBOX_FAILED
    assert not (root_owned / "made").exists()


async def test_a_workspace_its_user_cannot_reach_is_refused_naming_the_closed_directory(
    client: Client, sandbox: None, tmp_path: Path
) -> None:
    """A workspace of uid 1000 behind a directory only root may pass (as `/root` is) is
    refused at opening with the directory to open, not a bare `sandbox_failed`."""
    closed = tmp_path / "closed"
    closed.mkdir()
    closed.chmod(0o700)
    behind = closed / "work"
    behind.mkdir()
    os.chown(behind, OWNER_UID, OWNER_GID)  # its own, but not its parent's way through
    with pytest.raises(RemoteError) as raised:
        await request(
            client, subjects.SANDBOX_CHECK, SandboxCheck(workspace=str(behind)), SandboxReady,
            timeout_s=30,
        )  # fmt: skip
    assert raised.value.code == codes.SANDBOX_FAILED
    assert f"cannot reach {behind}: {closed} does not let it through" in raised.value.message
    assert f"chmod o+x {closed}" in raised.value.message


async def test_the_operators_host_uid_owns_what_commands_and_file_tools_make(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, state_dir: Path,
    workspace: Path,
) -> None:  # fmt: skip
    os.chmod(workspace, 0o777)
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(state_dir),
        sandbox_host_uid=OTHER,
        sandbox_host_gid=OTHER,
    )
    async with run_service(sandbox_service, settings):
        result = await shell(client, workspace, f"touch by-shell && {SETUID_SHELL}")
        assert result.exit_status == 0, result.stderr
        await write(client, workspace, "new/by-tool.txt", "text\n")
    for made in ("by-shell", "sh-copy", "new", "new/by-tool.txt"):
        assert owner_of(workspace / made) == (OTHER, OTHER)


async def test_a_host_uid_that_cannot_write_the_workspace_fails_the_check(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, state_dir: Path,
    workspace: Path,
) -> None:  # fmt: skip
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(state_dir), sandbox_host_uid=OTHER
    )
    async with run_service(sandbox_service, settings):
        with pytest.raises(RemoteError) as raised:
            await request(
                client,
                subjects.SANDBOX_CHECK,
                SandboxCheck(workspace=str(workspace)),
                SandboxReady,
                timeout_s=30,
            )
    assert raised.value.code == codes.SANDBOX_FAILED
    assert f"host uid {OTHER}" in raised.value.message
    assert "cannot write the workspace" in raised.value.message


async def test_the_file_tools_write_as_the_workspace_owner_never_setuid(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "planted").write_text("root's file\n")  # made by root, as a test does
    await write(client, workspace, "planted", "rewritten\n")
    await write(client, workspace, "deep/er/new.txt", "new\n")
    made = await shell(client, workspace, f"{SETUID_SHELL} && echo x > edit.txt")
    assert made.exit_status == 0, made.stderr
    await write(client, workspace, "sh-copy", "replaced\n")
    edit = EditFile(
        session_id=SESSION,
        workspace=str(workspace),
        input=EditFileInput(path="edit.txt", old_string="x", new_string="y"),
    )
    await request(client, subjects.SANDBOX_FILES, edit, FileResult, timeout_s=10)
    patch = ApplyPatch(
        session_id=SESSION,
        workspace=str(workspace),
        input=ApplyPatchInput(
            patch="*** Begin Patch\n*** Add File: patched/added.txt\n+added\n*** End Patch\n"
        ),
    )
    await request(client, subjects.SANDBOX_FILES, patch, FileResult, timeout_s=10)
    for path in (
        "planted",
        "deep",
        "deep/er",
        "deep/er/new.txt",
        "sh-copy",
        "edit.txt",
        "patched",
        "patched/added.txt",
    ):
        assert owner_of(workspace / path) == (OWNER_UID, OWNER_GID), path
    replaced = (workspace / "sh-copy").stat().st_mode
    assert not replaced & (stat.S_ISUID | stat.S_ISGID)
    assert stat.S_IMODE(replaced) == 0o755


async def test_a_skill_written_belongs_to_its_skills_dirs_owner_never_setuid(
    client: Client, sandbox: None, tmp_path: Path
) -> None:
    skills = owned(tmp_path / "skills")
    message = WriteSkill(
        session_id=SESSION,
        skills_dir=str(skills),
        name="notes",
        description="Keeps notes.",
        instructions="Write them down.",
    )
    await request(client, subjects.SANDBOX_SKILL_WRITE, message, FileResult, timeout_s=10)
    for path in (skills / "notes", skills / "notes" / "SKILL.md"):
        assert owner_of(path) == (OWNER_UID, OWNER_GID)
    assert not (skills / "notes" / "SKILL.md").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)


_UNPRIVILEGED_RUN = """
import site, sys
site.addsitedir(sys.argv[1])
import anyio, json, os
from pathlib import Path
from bastion.shared.sandboxing import BwrapBackend, SandboxSpec

async def main():
    spec = SandboxSpec(workspace=Path(sys.argv[2]), read_only=(Path(sys.argv[3]),))
    result = await BwrapBackend().run(spec, sys.argv[4])
    print(json.dumps({"euid": os.geteuid(), "status": result.exit_status,
                      "stdout": result.stdout, "stderr": result.stderr}))

anyio.run(main)
"""


def test_a_service_that_is_not_root_runs_the_sandbox_as_itself(
    workspace: Path, tmp_path: Path
) -> None:
    """The backend run by uid 1000 (its Python the system's, which that user can run):
    what a command makes is 1000's, and a root-only file stays unreadable."""
    shown = tmp_path / "shown"
    shown.mkdir(mode=0o755)
    (shown / "root-only").write_text("root's secret\n")
    (shown / "root-only").chmod(0o600)
    site_packages = sysconfig.get_paths()["purelib"]
    command = f"{SETUID_SHELL}; touch made; cat {shown}/root-only"
    done = subprocess.run(
        ["setpriv", f"--reuid={OWNER_UID}", f"--regid={OWNER_GID}", "--clear-groups", "--",
         "/usr/bin/python3", "-I", "-c", _UNPRIVILEGED_RUN, site_packages, str(workspace),
         str(shown), command],
        capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["euid"] == OWNER_UID
    assert "Permission denied" in report["stderr"]
    assert "root's secret" not in report["stdout"]
    for made in ("made", "sh-copy"):
        assert owner_of(workspace / made) == (OWNER_UID, OWNER_GID)
    assert (workspace / "sh-copy").stat().st_uid != 0
    assert sys.version_info[:2] == (3, 11)  # the system's Python shares this venv's ABI


async def test_a_bwrap_mcp_server_runs_as_its_directorys_owner_never_root(
    tmp_path: Path,
) -> None:
    root_owned = tmp_path / "server-root"
    root_owned.mkdir()
    refused = McpServerSpec(
        transport="stdio",
        command=("/bin/sh", "-c", "true"),
        sandbox="bwrap",
        directory=str(root_owned),
    )
    with pytest.raises(UpstreamUnreachable, match="never runs a sandbox as host root"):
        async with launching(refused, {}):
            pass
    directory = owned(tmp_path / "server")
    spec = McpServerSpec(
        transport="stdio",
        command=("/bin/sh", "-c", f"{SETUID_SHELL}; touch made; id -u"),
        sandbox="bwrap",
        directory=str(directory),
    )
    async with launching(spec, {}) as launch:
        done = await anyio.run_process(
            launch.argv, env=launch.env, pass_fds=launch.pass_fds, check=False
        )
    assert done.returncode == 0, done.stderr
    for made in ("made", "sh-copy"):
        assert owner_of(directory / made) == (OWNER_UID, OWNER_GID)


# --- finding 11: what a command sees of the host -----------------------------------------


async def test_no_bwrap_process_inside_names_the_workspaces_host_path(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(
        client,
        workspace,
        "for pid in /proc/[0-9]*; do tr '\\0' ' ' < $pid/cmdline; echo; "
        "readlink $pid/exe; tr '\\0' ' ' < $pid/environ; echo; done",
    )
    assert result.exit_status == 0, result.stderr
    assert str(workspace) not in result.stdout
    assert "bwrap" not in result.stdout
    assert "/proc/1/" not in result.stderr  # pid 1 was there to read, and is not bwrap


async def test_a_command_can_signal_itself_though_it_is_not_pid_1(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(client, workspace, "echo $$; kill -TERM $$")
    assert result.stdout.strip() != "1"
    assert result.ended == "signal"
    assert result.signal == 15


async def test_the_kernel_keyrings_of_the_host_user_are_not_listed(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(client, workspace, "cat /proc/keys /proc/key-users")
    assert result.stdout == ""
    assert result.exit_status != 0
