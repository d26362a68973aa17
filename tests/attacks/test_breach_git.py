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
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec
import pytest

from bastion.hooks.command import run_command
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import ApplyPatch, EditFile, ExecResult, FileResult, WriteFile
from bastion.proto.toolinput import ApplyPatchInput, EditFileInput, WriteFileInput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.sandboxing import BwrapBackend, SandboxSpec
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.docker import Box, containers_of, release
from tests.helpers.sandbox import CANARY, SESSION, Host, exists, shell, wait_for_file

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
    if swaps >= 3000 and not os.path.exists("swapped-enough"):
        open("swapped-enough", "w").close()
if swaps % 2:
    libc.renameat2(-100, b".git", -100, b"evil", 2)
    swaps += 1
print(swaps)
"""
SAFE: Final = "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; "
"""Git inside trusts the workspace whoever owns it (the sandbox's uid may not be its owner)."""


def _own(path: Path) -> None:
    """`path` and all under it the unprivileged owner's, as a workspace is, and writable by
    all: a command must be able to write it whether the sandbox runs as its owner or not,
    or a planting that fails would prove nothing."""
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            entry = Path(root) / name
            os.chown(entry, OWNER, OWNER, follow_symlinks=False)
            if not entry.is_symlink():
                entry.chmod(entry.stat().st_mode | 0o666 | (0o111 if entry.is_dir() else 0))
    os.chown(path, OWNER, OWNER)
    path.chmod(0o777)


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
    for args in (("init", "-q"), ("commit", "-q", "--allow-empty", "-m", "first")):
        done = _git(workspace, *args)
        assert done.returncode == 0, done.stderr
    _own(workspace)


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
    assert not exists(str(mark)), "something planted in the workspace ran on the host"


# --- finding 2: the protection resolves no host path twice -----------------------------


class _Swapper:
    """A host process swapping `.git` and `evil` in the workspace until stopped."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.process = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(workspace)], stdout=subprocess.PIPE, text=True
        )

    @property
    def enough(self) -> bool:
        """Whether it has made 3000 swaps yet (sandboxes keep starting until it has)."""
        return (self.workspace / "swapped-enough").exists()

    def stop(self) -> int:
        """Stop it (`.git` back in place); how many swaps it made."""
        stop = self.workspace / "stop-swapping"
        stop.touch()
        out, _ = self.process.communicate(timeout=60)
        stop.unlink()
        (self.workspace / "swapped-enough").unlink(missing_ok=True)
        return int(out)


def _look_alike(host: Host) -> None:
    """A repository and, beside it, `evil`: a look-alike whose config and hooks are links to
    the state directory's secret (the vault's key, say)."""
    workspace = host.workspace
    _repo(workspace)
    evil = workspace / "evil"
    evil.mkdir()
    (evil / "HEAD").write_text("ref: refs/heads/main\n")
    (evil / "config").symlink_to(host.state_dir / "sessions.key")
    (evil / "hooks").symlink_to(host.state_dir)
    _own(workspace)


@pytest.fixture
def swapper(host: Host) -> Iterator[_Swapper]:
    """The look-alike beside the repository, and a host process swapping the two without
    end, as a second session on the workspace would try to."""
    _look_alike(host)
    running = _Swapper(host.workspace)
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

    rounds = 0
    while (rounds < 6 or not swapper.enough) and rounds < 100:
        rounds += 1
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
        if result.stderr.startswith("bwrap:"):
            # bwrap checks that what it mounted is the descriptor's file: a mount point
            # moved by the swap stops the sandbox before the command runs (its sentence may
            # name where the look-alike's link points: the agent's own link, not a content)
            assert result.stdout == ""
        else:
            assert "sessions.key" not in result.stdout + result.stderr
    assert ran, "no sandbox started at all"
    assert any(stdout.startswith(config) for stdout in ran)  # the repository's own
    hooks = {path.name for path in (workspace / ".git/hooks").iterdir()}
    own = {*config.splitlines(), *hooks, ".git/hooks"}
    for stdout in ran:
        # the repository's own lines, or the look-alike's own links, dangling inside (the
        # swapper, a host process, had moved the dentry a protection was mounted on)
        assert set(stdout.splitlines()) <= own, stdout
    for reason in refused:  # `evil` was `.git` as the run started: refused, saying why
        assert reason.startswith(codes.INVALID_INPUT), reason
        assert "is a symbolic link" in reason


async def test_a_second_session_swapping_from_its_sandbox_never_wins(
    client: Client, sandbox: None, host: Host
) -> None:
    """The same race from where a session really is: its sandbox's `.git` is a mount point,
    so thousands of exchanges fail while the first session's sandboxes start."""
    _look_alike(host)
    workspace = host.workspace
    loop = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "tries = wins = 0\n"
        "open('swapping', 'w').close()\n"
        "while tries < 3000 or not os.path.exists('stop-swapping'):\n"
        "    tries += 1\n"
        "    wins += libc.renameat2(-100, b'.git', -100, b'evil', 2) == 0\n"
        "print(tries, wins)\n"
    )
    (workspace / "loop.py").write_text(loop)
    _own(workspace)
    attacker: list[ExecResult] = []
    seen: list[str] = []

    async def second_session() -> None:
        attacker.append(await shell(client, workspace, "python3 loop.py", session="b" * 16))

    async with anyio.create_task_group() as group:
        group.start_soon(second_session)
        await anyio.to_thread.run_sync(wait_for_file, workspace / "swapping", 20.0)
        for number in range(24):
            result = await shell(client, workspace, "cat .git/config", session=f"{number:016x}")
            seen.append(result.stdout + result.stderr)
        (workspace / "stop-swapping").touch()
    tries, wins = (int(word) for word in attacker[0].stdout.split())
    assert tries >= 3000
    assert wins == 0, f"the second session exchanged .git {wins} times"
    config = (workspace / ".git/config").read_text()
    assert seen == [config] * 24


async def test_a_sandbox_cannot_move_remove_or_exchange_dot_git(
    client: Client, sandbox: None, host: Host
) -> None:
    """What the swapper did from the host, a session cannot do from its sandbox: `.git` is
    a mount point there."""
    _repo(host.workspace)
    config = (host.workspace / ".git/config").read_text()
    exchange = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); os.mkdir('evil'); "
        "r = libc.renameat2(-100, b'.git', -100, b'evil', 2); "
        "print('exchange', r, os.strerror(ctypes.get_errno()))"
    )
    result = await shell(
        client,
        host.workspace,
        f"mv .git moved; rm -rf .git; echo 'gitdir: evil' > .git; python3 -c \"{exchange}\"",
    )
    assert "Device or resource busy" in result.stderr
    assert "exchange -1 Device or resource busy" in result.stdout
    assert (host.workspace / ".git/config").read_text() == config
    assert not (host.workspace / "moved").exists()


# --- finding 3: nothing a command writes makes git on the host run anything -----------


def _fsmonitor(mark: Path) -> str:
    return f"[core]\n\tfsmonitor = {_planted(mark)}\n"


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param("git config core.fsmonitor '{run}'", id="config"),
        pytest.param("git config --worktree core.fsmonitor '{run}'", id="config-worktree"),
        pytest.param(
            "printf '[extensions]\\n\\tworktreeConfig = true\\n' >> .git/config; "
            "printf '[core]\\n\\tfsmonitor = {run}\\n' > .git/config.worktree",
            id="config-worktree-file",
        ),
        pytest.param(
            "mv .git/hooks/pre-commit.sample .git/hooks/pre-commit; "
            "printf '#!/bin/sh\\n{run}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
            id="hook",
        ),
        pytest.param(
            "mkdir -p common && cp -r .git/objects .git/refs .git/HEAD common/ && "
            "printf '[core]\\n\\tfsmonitor = {run}\\n' > common/config && "
            "echo ../common > .git/commondir",
            id="commondir",
        ),
        pytest.param(
            "cp -r .git other && printf '[core]\\n\\tfsmonitor = {run}\\n' >> other/config; "
            "mv .git away; rm -rf .git; echo 'gitdir: other' > .git",
            id="gitdir-file",
        ),
        pytest.param(
            "mkdir -p .git/worktrees/w && echo ../.. > .git/worktrees/w/commondir && "
            "printf '[core]\\n\\tfsmonitor = {run}\\n' > .git/worktrees/w/config.worktree",
            id="worktrees",
        ),
    ],
)
async def test_a_planted_git_setting_never_runs_on_the_host(
    client: Client, sandbox: None, host: Host, plant: str
) -> None:
    _repo(host.workspace)
    mark = host.workspace / "PWNED"
    await shell(client, host.workspace, SAFE + plant.format(run=_planted(mark)))
    await _host_git_runs_nothing(host.workspace, mark)


async def test_git_still_commits_inside_the_protected_repository(
    client: Client, sandbox: None, host: Host
) -> None:
    """Objects, refs, the index and the logs stay writable: only control entries are not."""
    _repo(host.workspace)
    result = await shell(
        client,
        host.workspace,
        f"{SAFE}echo hello > a.txt && git add a.txt && "
        "git -c user.name=agent -c user.email=agent@example.org commit -qm 'add a' && "
        "git log --format=%s -1",
    )
    assert result.stdout == "add a\n", result.stderr
    assert "add a" in _git(host.workspace, "log", "--format=%s", "-1").stdout


async def test_a_commondir_a_command_makes_is_moved_aside_and_the_result_says_so(
    client: Client, sandbox: None, host: Host
) -> None:
    _repo(host.workspace)
    result = await shell(client, host.workspace, "echo .. > .git/commondir; echo done")
    assert result.stdout == "done\n"
    assert "the command made .git/commondir" in result.stderr
    assert "BASTION_GIT_WRITABLE" in result.stderr
    assert not (host.workspace / ".git/commondir").exists()
    aside = [p.name for p in (host.workspace / ".git").iterdir() if p.name.startswith("commondir.")]
    assert len(aside) == 1


@pytest.mark.parametrize(
    "link", ["objects/info/alternates", "packed-refs", "info/exclude", "refs/heads/planted"]
)
async def test_a_link_a_command_makes_where_git_reads_text_is_moved_aside(
    client: Client, sandbox: None, host: Host, link: str
) -> None:
    """`alternates -> <host file>` made git on the host (root's, in a hook) quote the named
    file line by line in its errors: the vault's master key, `/etc/shadow`."""
    _repo(host.workspace)
    plant = f"mkdir -p $(dirname .git/{link}) && ln -sf {host.canary} .git/{link}; echo done"
    result = await shell(client, host.workspace, plant)
    assert result.stdout == "done\n"
    assert f"the command made .git/{link}" in result.stderr
    made = host.workspace / ".git" / link
    assert not made.is_symlink()
    aside = [p for p in made.parent.iterdir() if p.name.startswith(made.name + ".refused-")]
    assert len(aside) == 1
    assert aside[0].is_symlink()  # kept, out of git's way, for a person to look at
    ran = await run_command(
        ["git", "-c", "safe.directory=*", "log", "--oneline", "-1"],
        {"event": "after-tool", "session": SESSION},
        str(host.workspace),
        30,
    )
    assert CANARY.strip() not in ran.stdout + ran.stderr


async def test_an_alternates_file_a_command_writes_is_moved_aside(
    client: Client, sandbox: None, host: Host, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A regular `objects/info/alternates` naming another repository's object store let a
    hook's git show a commit no sandbox could see (its hash set in a ref by the agent)."""
    other = tmp_path_factory.mktemp("other-repo")  # beside the host the test checks
    _repo(other)
    _git(other, "commit", "-q", "--allow-empty", "-m", "only in the other repository")
    foreign = _git(other, "rev-parse", "HEAD").stdout.strip()
    _repo(host.workspace)
    result = await shell(
        client,
        host.workspace,
        f"printf '%s\\n' {other}/.git/objects > .git/objects/info/alternates; "
        f"echo {foreign} > .git/refs/heads/foreign; echo done",
    )
    assert result.stdout == "done\n"
    assert "the command made .git/objects/info/alternates" in result.stderr
    assert not (host.workspace / ".git/objects/info/alternates").exists()
    ran = await run_command(
        ["git", "-c", "safe.directory=*", "log", "--oneline", "-1", "foreign"],
        {"event": "after-tool", "session": SESSION},
        str(host.workspace),
        30,
    )
    assert "only in the other repository" not in ran.stdout + ran.stderr


def _shadow() -> list[str]:
    """The lines of `/etc/shadow` (the test runs as root, as the finding's git did)."""
    return [line for line in Path("/etc/shadow").read_text().splitlines() if line]


def _quotes_shadow(workspace: Path) -> list[str]:
    """The lines of `/etc/shadow` that root's git on the host quoted in the workspace."""
    lines = _shadow()
    said = ""
    for args in (("log", "--oneline", "-1"), ("status",), ("diff", "HEAD")):
        done = _git(workspace, *args)
        said += done.stdout + done.stderr
    return [line for line in lines if line in said]


def _moved_aside(workspace: Path, moved: str, stderr: str) -> Path:
    """`.git/moved` was moved aside by the sweep, which said so: what is aside now."""
    assert f"the command made .git/{moved}, one of git's control files" in stderr, stderr
    made = workspace / ".git" / moved
    assert not made.is_symlink()
    aside = [p for p in made.parent.iterdir() if p.name.startswith(made.name + ".refused-")]
    assert len(aside) == 1, aside
    return aside[0]


LINKED_WAYS: Final = [
    pytest.param(
        "mkdir evilinfo; ln -s /etc/shadow evilinfo/alternates; rm -rf .git/objects/info; "
        "ln -s ../../evilinfo .git/objects/info",
        "objects/info",
        id="objects-info",
    ),
    pytest.param(
        "cp -r .git/objects evilobjects; mkdir -p evilobjects/info; "
        "ln -sf /etc/shadow evilobjects/info/alternates; rm -rf .git/objects; "
        "ln -s ../evilobjects .git/objects",
        "objects",
        id="objects",
    ),
    pytest.param(
        "mkdir evilinfo; for f in grafts exclude attributes; do ln -s /etc/shadow evilinfo/$f; "
        "done; rm -rf .git/info; ln -s ../evilinfo .git/info",
        "info",
        id="info",
    ),
    pytest.param(
        "mkdir -p .git/objects/info/commit-graphs; "
        "ln -s /etc/shadow .git/objects/info/commit-graphs/commit-graph-chain",
        "objects/info/commit-graphs/commit-graph-chain",
        id="commit-graph-chain",
    ),
]
"""Links a plain command makes on the way to what git reads as text, each to `/etc/shadow`,
and what must be moved aside: a link at `objects/info` was taken for a missing alternates."""


@pytest.mark.parametrize(("plant", "moved"), LINKED_WAYS)
async def test_a_link_on_the_way_to_what_git_reads_is_moved_aside(
    client: Client, sandbox: None, host: Host, plant: str, moved: str
) -> None:
    _repo(host.workspace)
    result = await shell(client, host.workspace, f"{plant}; echo done")
    assert result.stdout == "done\n", result.stderr
    assert _moved_aside(host.workspace, moved, result.stderr).is_symlink()
    assert _quotes_shadow(host.workspace) == []


async def test_a_linked_objects_never_leads_the_sweep_out_of_the_workspace(
    client: Client, sandbox: None, host: Host, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`.git/objects` a link to a host directory with links in its `info/`: the sweep (the
    service's, root's) must move the link aside, never rename what is in that directory."""
    outside = tmp_path_factory.mktemp("host-dir")
    (outside / "info").mkdir()
    (outside / "info/kept").symlink_to("/etc/hostname")
    (outside / "pack").mkdir()
    (outside / "pack/kept").symlink_to("/etc/hostname")
    _repo(host.workspace)
    result = await shell(
        client, host.workspace, f"rm -rf .git/objects; ln -s {outside} .git/objects; echo done"
    )
    assert result.stdout == "done\n", result.stderr
    _moved_aside(host.workspace, "objects", result.stderr)
    assert "objects/info" not in result.stderr
    assert sorted(p.name for p in (outside / "info").iterdir()) == ["kept"]
    assert sorted(p.name for p in (outside / "pack").iterdir()) == ["kept"]


async def test_a_linked_objects_info_naming_another_repositorys_store_is_moved_aside(
    client: Client, sandbox: None, host: Host, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same link, its alternates naming another repository's objects: a hook's git (the
    workspace owner's, who can read that store) must not show a commit of it."""
    other = tmp_path_factory.mktemp("other-repo")
    _repo(other)
    _git(other, "commit", "-q", "--allow-empty", "-m", "only in the other repository")
    foreign = _git(other, "rev-parse", "HEAD").stdout.strip()
    _repo(host.workspace)
    result = await shell(
        client,
        host.workspace,
        f"mkdir evilinfo; printf '%s\\n' {other}/.git/objects > evilinfo/alternates; "
        "rm -rf .git/objects/info; ln -s ../../evilinfo .git/objects/info; "
        f"echo {foreign} > .git/refs/heads/foreign; echo done",
    )
    assert result.stdout == "done\n", result.stderr
    _moved_aside(host.workspace, "objects/info", result.stderr)
    ran = await run_command(
        ["git", "-c", "safe.directory=*", "log", "--oneline", "-1", "foreign"],
        {"event": "after-tool", "session": SESSION},
        str(host.workspace),
        30,
    )
    assert "only in the other repository" not in ran.stdout + ran.stderr
    person = _git(host.workspace, "log", "--oneline", "-1", "foreign")
    assert "only in the other repository" not in person.stdout + person.stderr


async def test_a_link_behind_many_files_a_command_makes_in_dot_git_is_moved_aside(
    client: Client, sandbox: None, host: Host
) -> None:
    """Filling `.git`'s top with files must not use up what the sweep looks at before it
    reaches `info/`."""
    _repo(host.workspace)
    fill = 'python3 -c \'for n in range(60000): open(f".git/filler-{n}", "w").close()\''
    result = await shell(
        client, host.workspace, f"{fill} && ln -s /etc/shadow .git/info/grafts; echo done"
    )
    assert result.stdout == "done\n", result.stderr
    assert _moved_aside(host.workspace, "info/grafts", result.stderr).is_symlink()
    assert _quotes_shadow(host.workspace) == []


async def test_a_file_where_git_expects_objects_info_is_moved_aside(
    client: Client, sandbox: None, host: Host
) -> None:
    _repo(host.workspace)
    result = await shell(
        client, host.workspace, "rm -rf .git/objects/info; echo x > .git/objects/info; echo done"
    )
    assert result.stdout == "done\n", result.stderr
    assert _moved_aside(host.workspace, "objects/info", result.stderr).is_file()


async def test_a_link_already_in_the_repository_replaced_by_a_command_is_moved_aside(
    client: Client, sandbox: None, host: Host
) -> None:
    """A link git never makes (`info/grafts`) found as a run starts is moved aside before
    it (something that outlived a sweep left it), and one a command puts there after."""
    _repo(host.workspace)
    (host.workspace / ".git/info").mkdir(exist_ok=True)
    (host.workspace / ".git/info/grafts").symlink_to("../description")
    _own(host.workspace)
    result = await shell(client, host.workspace, "ln -sf /etc/shadow .git/info/grafts; echo done")
    assert result.stdout == "done\n", result.stderr
    assert "the run found .git/info/grafts as it started" in result.stderr, result.stderr
    assert "the command made .git/info/grafts" in result.stderr, result.stderr
    info = host.workspace / ".git/info"
    aside = sorted(p.name for p in info.iterdir() if p.name.startswith("grafts.refused-"))
    assert len(aside) == 2 and not (info / "grafts").exists(), aside
    assert _quotes_shadow(host.workspace) == []


async def test_a_commondir_or_alternates_link_left_between_commands_is_moved_aside_first(
    client: Client, sandbox: None, host: Host
) -> None:
    """What outlived a command's sweep (a process of the session, another session's
    command) and left a `commondir` or a linked `alternates` is moved aside before the next
    command runs, so it is never taken for the repository's own."""
    _repo(host.workspace)
    git = host.workspace / ".git"
    (git / "commondir").write_text("../ev\n")
    (git / "objects/info/alternates").symlink_to("/etc/shadow")
    _own(host.workspace)
    result = await shell(client, host.workspace, "cat .git/commondir 2>&1; echo ran")
    assert result.stdout.endswith("ran\n") and "../ev" not in result.stdout, result
    assert "the run found .git/commondir as it started" in result.stderr, result.stderr
    assert "the run found .git/objects/info/alternates" in result.stderr, result.stderr
    assert not (git / "commondir").exists()
    assert not (git / "objects/info/alternates").is_symlink()
    assert _quotes_shadow(host.workspace) == []


async def test_a_linked_objects_info_made_on_the_host_refuses_the_call_and_a_fix_restores_it(
    client: Client, sandbox: None, host: Host
) -> None:
    """What git reads through a link there could not be watched: refused as the run starts."""
    _repo(host.workspace)
    git = host.workspace / ".git"
    (git / "objects/info").rename(host.workspace / "myinfo")
    (git / "objects/info").symlink_to("../../myinfo")
    _own(host.workspace)
    with pytest.raises(RemoteError) as refused:
        await shell(client, host.workspace, "echo hi")
    assert refused.value.code == codes.INVALID_INPUT
    assert ".git/objects/info is a symbolic link" in refused.value.message
    assert "BASTION_GIT_WRITABLE" in refused.value.message
    (git / "objects/info").unlink()
    (host.workspace / "myinfo").rename(git / "objects/info")
    result = await shell(client, host.workspace, "echo fine")
    assert result.stdout == "fine\n"


@pytest.mark.parametrize("session", [SESSION, ""], ids=["warm", "cold"])
async def test_a_linked_objects_info_is_moved_aside_in_warm_and_cold_sandboxes(
    host: Host, session: str
) -> None:
    """The bubblewrap backend itself, in a session's warm sandbox and in a cold one: the
    sweep after each command is the same."""
    _repo(host.workspace)
    backend = BwrapBackend(state_dir=host.state_dir)
    spec = SandboxSpec(workspace=host.workspace, session_id=session, hidden=(host.state_dir,))
    try:
        await backend.run(spec, "true")  # the warm sandbox is there before the attack
        result = await backend.run(spec, f"{LINKED_WAYS[0].values[0]}; echo done")
        again = await backend.run(spec, "echo next")
    finally:
        await backend.aclose()
    assert result.stdout == "done\n", result.stderr
    assert _moved_aside(host.workspace, "objects/info", result.stderr).is_symlink()
    assert again.stdout == "next\n", again.stderr
    assert "bastion:" not in again.stderr
    assert _quotes_shadow(host.workspace) == []


async def test_a_link_already_in_the_repository_is_left_as_it_was(
    client: Client, sandbox: None, host: Host
) -> None:
    _repo(host.workspace)
    (host.workspace / ".git/info").mkdir(exist_ok=True)
    (host.workspace / ".git/info/exclude").unlink(missing_ok=True)
    (host.workspace / ".git/info/exclude").symlink_to("../description")
    _own(host.workspace)
    result = await shell(client, host.workspace, "echo done")
    assert "bastion:" not in result.stderr
    assert (host.workspace / ".git/info/exclude").is_symlink()


async def test_a_hook_in_a_workspace_runs_as_its_owner_not_as_root(host: Host) -> None:
    """Under a root runner a command hook runs as the workspace's owner: whatever an agent
    left there acts with that user's rights, never root's."""
    _own(host.workspace)
    ran = await run_command(
        ["sh", "-c", "id -u; id -g; cat /etc/shadow"],
        {"event": "after-tool", "session": SESSION},
        str(host.workspace),
        30,
    )
    uid, gid = host.workspace.stat().st_uid, host.workspace.stat().st_gid
    assert uid != 0
    assert ran.stdout.split()[:2] == [str(uid), str(gid)]
    assert "Permission denied" in ran.stderr


async def test_git_init_with_a_hook_and_an_fsmonitor_cannot_make_a_repository(
    client: Client, sandbox: None, host: Host
) -> None:
    _own(host.workspace)
    mark = host.workspace / "PWNED"
    result = await shell(
        client,
        host.workspace,
        f"{SAFE}git init -q && git config core.fsmonitor '{_planted(mark)}' && "
        f"printf '#!/bin/sh\\n{_planted(mark)}\\n' > .git/hooks/pre-commit",
    )
    assert result.exit_status != 0
    assert "Read-only file system" in result.stderr
    assert list((host.workspace / ".git").iterdir()) == []  # the empty placeholder
    await _host_git_runs_nothing(host.workspace, mark)


async def test_the_workspaces_own_gitconfig_made_by_a_command_is_moved_aside(
    client: Client, sandbox: None, host: Host
) -> None:
    """HOME is the workspace inside: its `.gitconfig` and `.config/git` are git's too."""
    _repo(host.workspace)
    mark = host.workspace / "PWNED"
    config = _fsmonitor(mark).replace("\n", "\\n").replace("\t", "\\t")
    result = await shell(
        client,
        host.workspace,
        f"printf '{config}' > .gitconfig; mkdir -p .config/git; "
        f"printf '{config}' > .config/git/config",
    )
    assert "the command made .gitconfig" in result.stderr
    assert "the command made .config/git" in result.stderr
    assert not (host.workspace / ".gitconfig").exists()
    assert not (host.workspace / ".config/git").exists()
    await _host_git_runs_nothing(host.workspace, mark, home=host.workspace)


@pytest.mark.parametrize(
    ("had", "plant", "moved"),
    [
        pytest.param(
            True,
            "mv .config moved && mkdir -p .config/git && printf '{config}' > .config/git/config",
            ".config/git",
            id="renamed-parent",
        ),
        pytest.param(
            False,
            "mkdir -p cfg/git && printf '{config}' > cfg/git/config && ln -s cfg .config",
            ".config",
            id="linked-parent",
        ),
    ],
)
async def test_a_config_git_reached_through_a_new_parent_is_moved_aside(
    client: Client, sandbox: None, host: Host, had: bool, plant: str, moved: str
) -> None:
    """`.config/git` read-only (or watched) is no protection if a command can put another
    `.config` in the way: git with HOME at the workspace reads what is there now."""
    _repo(host.workspace)
    if had:
        (host.workspace / ".config/git").mkdir(parents=True)
        (host.workspace / ".config/git/ignore").write_text("*.log\n")
        _own(host.workspace)
    mark = host.workspace / "PWNED"
    config = _fsmonitor(mark).replace("\n", "\\n").replace("\t", "\\t")
    result = await shell(client, host.workspace, plant.format(config=config) + "; echo done")
    assert result.stdout == "done\n", result.stderr
    assert f"the command made {moved}," in result.stderr
    assert not (host.workspace / ".config/git/config").exists()
    await _host_git_runs_nothing(host.workspace, mark, home=host.workspace)


async def test_an_existing_gitconfig_of_the_workspace_is_read_only(
    client: Client, sandbox: None, host: Host
) -> None:
    _repo(host.workspace)
    (host.workspace / ".gitconfig").write_text("[user]\n\tname = owner\n")
    _own(host.workspace)
    result = await shell(client, host.workspace, "echo '[core] fsmonitor = x' >> .gitconfig")
    assert "Read-only file system" in result.stderr
    assert (host.workspace / ".gitconfig").read_text() == "[user]\n\tname = owner\n"


async def test_a_submodule_the_agent_made_is_not_entered_by_a_hooks_git(
    client: Client, sandbox: None, host: Host
) -> None:
    """A nested repository with a gitlink in the index: a hook's git does not recurse."""
    _repo(host.workspace)
    mark = host.workspace / "PWNED"
    who = "-c user.name=a -c user.email=a@a"
    result = await shell(
        client,
        host.workspace,
        f"{SAFE}git init -q sub && git -C sub {who} commit -q --allow-empty -m s && "
        f"git -C sub config core.fsmonitor '{_planted(mark)}' && echo x > sub/f && "
        "git add sub && printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n' "
        "> .gitmodules && git add .gitmodules && echo planted",
    )
    assert result.stdout == "planted\n", result.stderr
    _own(host.workspace)
    event = {"event": "after-tool", "session": SESSION}
    for args in (
        ["status"],
        ["diff", "HEAD"],
        ["-c", "user.name=h", "-c", "user.email=h@h", "commit", "-qm", "h"],
    ):
        ran = await run_command(
            ["git", "-c", "safe.directory=*", *args], event, str(host.workspace), 30
        )
        assert ran.failure == ""
    assert not exists(str(mark))


async def test_a_hooks_git_runs_under_the_locked_environment(tmp_path: Path) -> None:
    event = {"event": "after-tool", "session": SESSION}
    ran = await run_command(
        ["git", "config", "--show-scope", "--get-regexp", "^(core|submodule|protocol)\\."],
        event,
        str(tmp_path),
        30,
    )
    assert "command\tcore.fsmonitor false" in ran.stdout
    assert "command\tcore.hookspath /dev/null" in ran.stdout
    assert "command\tsubmodule.recurse false" in ran.stdout
    assert "command\tprotocol.allow never" in ran.stdout
    assert "global" not in ran.stdout
    assert "system" not in ran.stdout


# --- finding 3: the file tools refuse git's control paths -----------------------------


async def _file(client: Client, message: WriteFile | EditFile | ApplyPatch) -> str:
    result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    return str(result.text)


def _write(workspace: Path, path: str, content: str) -> WriteFile:
    return WriteFile(
        session_id=SESSION,
        workspace=str(workspace),
        input=WriteFileInput(path=path, content=content),
    )


def _patch(workspace: Path, patch: str) -> ApplyPatch:
    return ApplyPatch(
        session_id=SESSION, workspace=str(workspace), input=ApplyPatchInput(patch=patch)
    )


HOOK_MOVE: Final = (
    "*** Begin Patch\n*** Update File: .git/hooks/pre-commit.sample\n"
    "*** Move to: .git/hooks/pre-commit\n@@\n #!/bin/sh\n+touch PWNED\n*** End Patch\n"
)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda w: _write(w, ".git/config", "[core]\n\tfsmonitor = x\n"), id="write-config"
        ),
        pytest.param(lambda w: _write(w, ".git/commondir", "../x\n"), id="write-commondir"),
        pytest.param(
            lambda w: _write(w, ".git/objects/info/alternates", "/elsewhere/.git/objects\n"),
            id="write-alternates",
        ),
        pytest.param(lambda w: _write(w, ".git/hooks/pre-commit", "x"), id="write-hook"),
        pytest.param(lambda w: _write(w, ".git/modules/s/config", "x"), id="write-module"),
        pytest.param(lambda w: _write(w, ".git/worktrees/w/config.worktree", "x"), id="worktree"),
        pytest.param(lambda w: _write(w, "link/config", "x"), id="through-a-link"),
        pytest.param(lambda w: _write(w, "sub/.git/config", "x"), id="nested-repo"),
        pytest.param(lambda w: _write(w, "sub/.git", "gitdir: ../x\n"), id="gitdir-file"),
        pytest.param(lambda w: _write(w, ".gitconfig", "x"), id="home-gitconfig"),
        pytest.param(lambda w: _write(w, ".config/git/config", "x"), id="home-config-git"),
        pytest.param(
            lambda w: EditFile(
                session_id=SESSION,
                workspace=str(w),
                input=EditFileInput(
                    path=".git/config", old_string="[core]", new_string="[core]\n\tfsmonitor = x"
                ),
            ),
            id="edit-config",
        ),
        pytest.param(lambda w: _patch(w, HOOK_MOVE), id="patch-move-hook"),
        pytest.param(
            lambda w: _patch(
                w, "*** Begin Patch\n*** Delete File: .git/hooks/pre-commit.sample\n*** End Patch\n"
            ),
            id="patch-delete-hook",
        ),
        pytest.param(
            lambda w: _patch(
                w, "*** Begin Patch\n*** Add File: .git/commondir\n+..\n*** End Patch\n"
            ),
            id="patch-add-commondir",
        ),
    ],
)
async def test_the_file_tools_refuse_git_control_paths(
    client: Client, sandbox: None, host: Host, change: object
) -> None:
    _repo(host.workspace)
    (host.workspace / "link").symlink_to(".git")
    _own(host.workspace)
    before = sorted(str(p) for p in host.workspace.rglob("*"))
    config = (host.workspace / ".git/config").read_text()
    with pytest.raises(RemoteError) as refused:
        await _file(client, change(host.workspace))  # type: ignore[operator]
    assert refused.value.code == codes.INVALID_INPUT
    assert "one of git's control files" in refused.value.message
    assert "BASTION_GIT_WRITABLE" in refused.value.message
    assert sorted(str(p) for p in host.workspace.rglob("*")) == before
    assert (host.workspace / ".git/config").read_text() == config


async def test_the_operator_can_let_the_file_tools_write_git_control_files(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, host: Host
) -> None:
    _repo(host.workspace)
    lifted = msgspec.structs.replace(settings, git_writable=True)
    async with run_service(sandbox_service, lifted):
        said = await _file(client, _patch(host.workspace, HOOK_MOVE))
    assert said == "moved .git/hooks/pre-commit.sample -> .git/hooks/pre-commit"


async def test_the_file_tools_still_write_ordinary_files_beside_dot_git(
    client: Client, sandbox: None, host: Host
) -> None:
    _repo(host.workspace)
    assert await _file(client, _write(host.workspace, "src/git/config", "ok\n"))
    assert await _file(client, _write(host.workspace, ".github/workflows/ci.yml", "ok\n"))
    assert await _file(client, _write(host.workspace, ".git-blame-ignore-revs", "ok\n"))


# --- finding 12: an odd control entry refuses the call, never breaks the workspace ----


async def test_a_symlinked_hooks_dir_refuses_the_call_clearly_and_a_fix_restores_it(
    client: Client, sandbox: None, host: Host
) -> None:
    _repo(host.workspace)
    git = host.workspace / ".git"
    (git / "hooks").rename(host.workspace / "myhooks")
    (git / "hooks").symlink_to("../myhooks")
    _own(host.workspace)
    with pytest.raises(RemoteError) as refused:
        await shell(client, host.workspace, "echo hi")
    assert refused.value.code == codes.INVALID_INPUT
    assert ".git/hooks is a symbolic link" in refused.value.message
    assert "BASTION_GIT_WRITABLE" in refused.value.message
    (git / "hooks").unlink()
    (host.workspace / "myhooks").rename(git / "hooks")
    result = await shell(client, host.workspace, "echo hi > .git/hooks/x; echo fine")
    assert result.stdout == "fine\n"
    assert "Read-only file system" in result.stderr


# --- the Docker backend: the same table, its mounts proven after the container starts --


@pytest.fixture
async def docker_box(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    host: Host,
    backend_name: str,
    engine: Any,
    owner: str,
) -> AsyncIterator[Box]:
    """A sandbox service whose containers carry this test's own owner label (another
    service starting on the machine removes those of its owner only), and a way in."""
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(host.state_dir), docker_owner=owner
    )
    async with run_service(sandbox_service, settings):
        made = Box(client, host, backend_name)
        yield made
        for session in sorted(made.sessions):
            await release(client, session)
    assert containers_of(engine, owner) == [], "a container outlived its session"


async def test_docker_dot_git_cannot_be_moved_and_a_commondir_is_moved_aside(
    docker_box: Box,
) -> None:
    box = docker_box
    workspace = box.host.workspace
    _repo(workspace)
    mark = workspace / "PWNED"
    result = await box.shell(
        "mv .git away; mkdir -p common && cp -r .git/objects .git/refs .git/HEAD common/ && "
        f"printf '[core]\\n\\tfsmonitor = {_planted(mark)}\\n' > common/config && "
        "echo ../common > .git/commondir && echo planted"
    )
    assert "Device or resource busy" in result.stderr
    assert result.stdout == "planted\n", result.stderr
    assert "the command made .git/commondir" in result.stderr
    await _host_git_runs_nothing(workspace, mark)


async def test_docker_swapping_dot_git_while_containers_start_never_shows_a_host_file(
    docker_box: Box, swapper: _Swapper
) -> None:
    box = docker_box
    workspace = box.host.workspace
    seen: list[str] = []
    refused: list[str] = []
    number = 0
    while (number < 8 or not swapper.enough) and number < 200:
        number += 1
        try:
            result = await box.shell("cat .git/config", session=f"{number:016x}")
        except RemoteError as error:
            refused.append(f"{error.code}: {error.message}")
            continue
        seen.append(result.stdout + result.stderr)
    swaps = swapper.stop()
    assert swaps >= 3000, f"only {swaps} swaps: the race did not run throughout"
    config = (workspace / ".git/config").read_text()
    for text in seen:
        assert "state secret" not in text
    missing = "cat: .git/config: No such file or directory\n"
    # the repository's own, or the look-alike's own dangling link (the swapper, a host
    # process, moved the dentry a mount was on after the mounts were checked)
    assert all(text in (config, missing) for text in seen), seen
    # swapped without end, the engine's mounts rarely survive their check: fail closed
    assert len(seen) + len(refused) == number
    settled = await box.shell("cat .git/config", session="f" * 16)
    assert settled.stdout == config  # and once the swapping stops, the repository's own
    for reason in refused:
        assert "state secret" not in reason
        # the look-alike was `.git` as the call started (refused, saying why); or a path
        # the engine mounts had moved when it mounted it, so the engine (runc checks
        # mount paths too) or the check of the mounts stopped the container
        if reason.startswith(codes.INVALID_INPUT):
            assert "is a symbolic link" in reason, reason
        else:
            assert reason.startswith(codes.SANDBOX_FAILED), reason


async def test_docker_a_linked_objects_info_is_moved_aside(docker_box: Box) -> None:
    """The Docker backend runs the same sweep once its container's command ends."""
    box = docker_box
    workspace = box.host.workspace
    _repo(workspace)
    result = await box.shell(f"{LINKED_WAYS[0].values[0]}; echo done")
    assert result.stdout == "done\n", result.stderr
    assert _moved_aside(workspace, "objects/info", result.stderr).is_symlink()
    assert _quotes_shadow(workspace) == []
