"""The bubblewrap launcher: the sandbox it builds, the limits it applies, what it reports."""

from __future__ import annotations

import os
import resource
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from bastion.proto.sandbox import Limits
from bastion.shared.errors import InvalidInput
from bastion.shared.sandboxing import BwrapBackend, SandboxFailed, SandboxSpec, parse_backend
from bastion.shared.sandboxing.argv import PID_ONE, bwrap_argv, prlimit_argv
from bastion.shared.sandboxing.cgroup import CommandCgroup, find_cgroup_root, tenant_group_name
from bastion.shared.sandboxing.output import CappedOutput
from bastion.shared.sandboxing.warm import marked_pids, marker
from tests.helpers.sleepers import sleeping, unique_duration

MiB = 1024 * 1024


@pytest.fixture
def backend() -> BwrapBackend:
    return BwrapBackend()


def argv_for(spec: SandboxSpec) -> list[str]:
    return bwrap_argv(
        "bwrap", spec, ["/bin/sh", "-c", "true"], status_fd=3, data_fds=[(4, "/etc/passwd")]
    )


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


# --- the command line ------------------------------------------------------------------


def test_the_sandbox_runs_as_uid_10001_in_new_namespaces_without_capabilities(
    workspace: Path,
) -> None:
    argv = argv_for(SandboxSpec(workspace=workspace))
    joined = " ".join(argv)
    assert "--unshare-all --unshare-user --disable-userns --uid 10001 --gid 10001" in joined
    for flag in ("--die-with-parent", "--new-session", "--as-pid-1", "--clearenv"):
        assert flag in joined
    assert "--cap-drop ALL" in joined
    assert "--share-net" not in argv
    assert f"--bind {workspace} /workspace" in joined
    assert argv[-8:] == ["--", *PID_ONE, "/bin/sh", "-c", "true"]


def test_a_spec_without_its_workspace_binds_none_and_starts_in_an_empty_tmp(
    workspace: Path,
) -> None:
    argv = argv_for(SandboxSpec(workspace=workspace, workspace_shown=False))
    joined = " ".join(argv)
    assert str(workspace) not in joined and "/workspace" not in argv
    assert "--chdir /tmp" in joined and "--setenv HOME /tmp" in joined
    assert "--setenv PYTHONSAFEPATH 1" in joined


def test_the_host_network_mode_shares_the_network(workspace: Path) -> None:
    assert "--share-net" in argv_for(SandboxSpec(workspace=workspace, network="host"))


def test_merged_usr_directories_become_symlinks_and_others_read_only_binds(
    workspace: Path,
) -> None:
    joined = " ".join(argv_for(SandboxSpec(workspace=workspace)))
    for directory in ("/bin", "/lib", "/sbin"):
        if os.path.islink(directory):
            assert f"--symlink {os.readlink(directory)} {directory}" in joined
        elif os.path.isdir(directory):
            assert f"--ro-bind {directory} {directory}" in joined


def test_the_hosts_user_database_is_never_bound_only_a_generated_one(workspace: Path) -> None:
    argv = argv_for(SandboxSpec(workspace=workspace))
    assert "/etc/passwd" not in [argv[i + 1] for i, arg in enumerate(argv) if "bind" in arg]
    assert "/etc/shadow" not in argv
    assert argv[argv.index("--ro-bind-data") :][:3] == ["--ro-bind-data", "4", "/etc/passwd"]


def test_a_hidden_path_inside_a_bound_tree_is_masked(workspace: Path) -> None:
    joined = " ".join(
        argv_for(SandboxSpec(workspace=workspace, hidden=(Path("/usr/local/state"), Path("/srv"))))
    )
    assert "--tmpfs /usr/local/state --remount-ro /usr/local/state" in joined
    assert "/srv" not in joined


def test_a_limit_above_what_the_service_may_grant_is_lowered_to_its_hard_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hard = {resource.RLIMIT_CPU: 30, resource.RLIMIT_AS: MiB}
    monkeypatch.setattr(
        resource, "getrlimit", lambda which: (0, hard.get(which, resource.RLIM_INFINITY))
    )
    argv = prlimit_argv("prlimit", Limits(cpu_s=120, address_space_bytes=4 * MiB))
    assert argv[1:3] == ["--cpu=30:30", f"--as={MiB}"]


def test_limits_become_prlimit_options_with_a_softer_cpu_limit() -> None:
    argv = prlimit_argv(
        "prlimit", Limits(cpu_s=7, address_space_bytes=MiB, file_size_bytes=2 * MiB)
    )
    assert argv == ["prlimit", "--cpu=7:8", f"--as={MiB}", f"--fsize={2 * MiB}", "--"]


# --- backend and network names ---------------------------------------------------------


def test_the_declared_network_runs_with_no_network_of_its_own() -> None:
    assert parse_backend("bwrap", "declared") == "none"


def test_an_unknown_network_is_refused_naming_the_three_modes() -> None:
    with pytest.raises(InvalidInput, match="none, declared or host"):
        parse_backend("bwrap", "bridge")


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(InvalidInput, match="bwrap"):
        parse_backend("firecracker", "none")


# --- output ---------------------------------------------------------------------------


def test_output_under_the_cap_is_kept_whole() -> None:
    output = CappedOutput(1024)
    output.feed(b"hello\n")
    assert (output.text(), output.cut) == ("hello\n", 0)


def test_output_over_the_cap_keeps_head_and_tail_around_a_marker() -> None:
    output = CappedOutput(10)
    for chunk in (b"abcdefgh", b"ijklmnop", b"qrstuvwxyz"):
        output.feed(chunk)
    assert output.cut == 16
    assert output.text() == "abcde\n[... 16 bytes cut ...]\nvwxyz"


# --- a real sandbox --------------------------------------------------------------------


async def test_a_command_runs_as_the_sandbox_user_with_home_in_the_workspace(
    backend: BwrapBackend, workspace: Path
) -> None:
    result = await backend.run(SandboxSpec(workspace=workspace), "id; echo $HOME; pwd")
    assert result.stdout.splitlines() == [
        "uid=10001(sandbox) gid=10001(sandbox) groups=10001(sandbox)",
        "/workspace",
        "/workspace",
    ]
    assert (result.ended, result.exit_status) == ("exited", 0)


async def test_the_environment_holds_only_the_allowlist(
    backend: BwrapBackend, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BASTION_NATS_PASSWORD", "hunter2")
    result = await backend.run(SandboxSpec(workspace=workspace), "env")
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert names <= {"PATH", "HOME", "LANG", "TERM", "TMPDIR", "PWD", "SHLVL", "_"}
    assert "hunter2" not in result.stdout


async def test_the_system_is_read_only_and_home_directories_are_absent(
    backend: BwrapBackend, workspace: Path
) -> None:
    result = await backend.run(
        SandboxSpec(workspace=workspace),
        "touch /usr/local/x; touch /etc/x; ls /root /home; cat /etc/shadow; touch ok",
    )
    assert result.stderr.count("Read-only file system") == 2
    assert "cannot access '/root'" in result.stderr
    assert "cannot access '/home'" in result.stderr
    assert "/etc/shadow: No such file" in result.stderr
    assert (workspace / "ok").exists()


async def test_there_is_no_network_but_loopback(
    backend: BwrapBackend, workspace: Path, listening_port: int
) -> None:
    script = (
        "import socket\n"
        f"try: socket.create_connection(('127.0.0.1', {listening_port}), timeout=5)\n"
        "except OSError as e: print('refused', type(e).__name__)\n"
        "else: print('connected')\n"
        "import urllib.request\n"
        "try: urllib.request.urlopen('http://example.com', timeout=5)\n"
        "except OSError as e: print('no network', type(e).__name__)\n"
    )
    result = await backend.run(SandboxSpec(workspace=workspace), f'python3 -c "{script}"')
    assert result.stdout.splitlines() == ["refused ConnectionRefusedError", "no network URLError"]


async def test_tmp_is_private_to_each_run(backend: BwrapBackend, workspace: Path) -> None:
    spec = SandboxSpec(workspace=workspace)
    await backend.run(spec, "echo x > /tmp/left-behind")
    result = await backend.run(spec, "ls /tmp")
    assert result.stdout == ""


async def test_a_command_that_fails_is_a_result_with_its_status(
    backend: BwrapBackend, workspace: Path
) -> None:
    result = await backend.run(SandboxSpec(workspace=workspace), "echo oops >&2; exit 3")
    assert (result.ended, result.exit_status, result.signal) == ("exited", 3, None)
    assert result.stderr == "oops\n"


async def test_a_command_killed_by_a_signal_says_which(
    backend: BwrapBackend, workspace: Path
) -> None:
    result = await backend.run(SandboxSpec(workspace=workspace), "kill -TERM $$")
    assert (result.ended, result.signal, result.exit_status) == ("signal", 15, 143)


async def test_the_wall_clock_kills_the_command_and_its_children(
    backend: BwrapBackend, workspace: Path
) -> None:
    spec = SandboxSpec(workspace=workspace, limits=Limits(wall_s=0.5))
    duration = unique_duration()
    result = await backend.run(spec, f"sleep {duration} & sleep {duration}")
    assert result.ended == "timeout"
    assert sleeping(duration) == []


async def test_a_cancelled_run_kills_the_command_and_its_children(
    backend: BwrapBackend, workspace: Path
) -> None:
    spec = SandboxSpec(workspace=workspace, limits=Limits(wall_s=100))
    duration = unique_duration()
    with anyio.move_on_after(0.5):
        await backend.run(spec, f"sleep {duration} & sleep {duration}")
    assert sleeping(duration) == []


async def test_a_file_over_the_size_limit_is_stopped(
    backend: BwrapBackend, workspace: Path
) -> None:
    spec = SandboxSpec(workspace=workspace, limits=Limits(file_size_bytes=MiB))
    result = await backend.run(spec, "head -c 2000000 /dev/zero > big")
    assert (result.ended, result.signal) == ("signal", 25)  # SIGXFSZ
    assert (workspace / "big").stat().st_size == MiB


async def test_cpu_and_address_space_limits_apply_inside(
    backend: BwrapBackend, workspace: Path
) -> None:
    spec = SandboxSpec(workspace=workspace, limits=Limits(cpu_s=7, address_space_bytes=512 * MiB))
    result = await backend.run(spec, "ulimit -t; ulimit -v")
    assert result.stdout.split() == ["7", str(512 * 1024)]


async def test_ten_mebibytes_of_output_are_cut_to_the_cap_with_a_marker(
    backend: BwrapBackend, workspace: Path
) -> None:
    spec = SandboxSpec(workspace=workspace, limits=Limits(output_bytes=64 * 1024))
    result = await backend.run(spec, "head -c 10485760 /dev/zero | tr '\\0' a")
    assert result.stdout_cut == 10 * MiB - 64 * 1024
    head, marker, tail = result.stdout.split("\n")
    assert marker == f"[... {result.stdout_cut} bytes cut ...]"
    assert head == tail == "a" * (32 * 1024)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_tap_is_given_every_chunk_of_both_streams_as_they_are_read(
    workspace: Path, tmp_path: Path, warm: bool
) -> None:
    """A streamed call's tap (`SandboxSpec.tap`) sees all the output, each stream apart,
    in a cold sandbox and in a session's warm one; the result is what it always was."""
    tapped: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

    def tap(stream: str, chunk: bytes) -> None:
        tapped[stream] += chunk

    backend = BwrapBackend(state_dir=tmp_path / "state") if warm else BwrapBackend()
    spec = SandboxSpec(
        workspace=workspace,
        limits=Limits(output_bytes=64 * 1024),
        session_id="0123456789abcdef" if warm else "",
        tap=tap,
    )
    try:
        result = await backend.run(
            spec, "for i in 1 2 3; do echo out-$i; echo err-$i >&2; done; head -c 200000 /dev/zero"
        )
        assert bool(marked_pids(marker(tmp_path / "state"))) == warm  # a warm sandbox ran it
    finally:
        await backend.aclose()
    assert tapped["stderr"] == b"err-1\nerr-2\nerr-3\n" and result.stderr == "err-1\nerr-2\nerr-3\n"
    assert tapped["stdout"] == b"out-1\nout-2\nout-3\n" + b"\0" * 200000
    assert result.stdout_cut == len(tapped["stdout"]) - 64 * 1024  # the result keeps its cap


async def test_a_missing_bwrap_is_a_sandbox_failure_saying_to_install_it(
    workspace: Path,
) -> None:
    with pytest.raises(SandboxFailed, match="install the bubblewrap package"):
        await BwrapBackend(bwrap="no-such-bwrap").run(SandboxSpec(workspace=workspace), "true")


async def test_a_bwrap_removed_after_a_first_run_is_looked_up_again_and_missed(
    workspace: Path, tmp_path: Path
) -> None:
    found = shutil.which("bwrap")
    assert found is not None
    programs = tmp_path / "programs"
    programs.mkdir()
    (programs / "bwrap").symlink_to(found)
    backend = BwrapBackend(bwrap=str(programs / "bwrap"))
    assert (await backend.run(SandboxSpec(workspace=workspace), "true")).exit_status == 0
    (programs / "bwrap").unlink()
    with pytest.raises(SandboxFailed, match="install the bubblewrap package"):
        await backend.run(SandboxSpec(workspace=workspace), "true")


async def test_a_sandbox_that_does_not_start_is_a_failure_not_a_result(
    workspace: Path,
) -> None:
    with pytest.raises(SandboxFailed, match="did not start"):
        await BwrapBackend(bwrap="false").run(SandboxSpec(workspace=workspace), "true")


async def test_the_check_runs_true_and_names_bubblewrap(
    backend: BwrapBackend, workspace: Path
) -> None:
    detail = await backend.check(SandboxSpec(workspace=workspace))
    assert detail.startswith("bubblewrap")
    assert "uid 10001" in detail


def test_on_cgroup_v1_a_process_joins_through_tasks_and_on_v2_through_cgroup_procs(
    tmp_path: Path,
) -> None:
    """On v1 the joining process (single-threaded) writes `0` to `tasks`, which moves it
    without the kernel's system-wide migration lock; v2 has only `cgroup.procs`."""
    for controller in ("pids", "memory"):
        (tmp_path / controller / "service").mkdir(parents=True)
    proc = tmp_path / "proc-cgroup"
    proc.write_text("8:pids:/service\n4:memory:/service\n")
    root = find_cgroup_root(tmp_path, proc)
    assert root is not None and root.version == 1
    command = CommandCgroup(root, Limits(processes=7, memory_bytes=4096))
    joined = command.join_argv()[2]
    for controller in ("pids", "memory"):
        [made] = [path for path in (tmp_path / controller / "service").iterdir()]
        assert f"echo 0 > {made / 'tasks'}" in joined
    assert "cgroup.procs" not in joined


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_commands_processes_count_against_its_own_cgroups_process_limit(
    workspace: Path, tmp_path: Path, warm: bool
) -> None:
    """Joined as each launcher joins (cold: its shell; warm: the command's first process,
    through the descriptors the init is passed): a fork past the group's bound fails."""
    if find_cgroup_root() is None:
        pytest.skip("no cgroup this service may write here: RLIMIT_NPROC bounds commands")
    backend = BwrapBackend(state_dir=tmp_path / "state") if warm else BwrapBackend()
    spec = SandboxSpec(
        workspace=workspace,
        limits=Limits(processes=8),
        session_id="0123456789abcdef" if warm else "",
    )
    try:
        result = await backend.run(spec, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; wait")
        assert bool(marked_pids(marker(tmp_path / "state"))) == warm
    finally:
        await backend.aclose()
    assert result.limit_hit == "process_limit"
    assert "fork" in result.stderr.lower() or "resource" in result.stderr.lower()


def test_on_cgroup_v2_a_tenants_commands_groups_sit_in_its_group_of_the_set_weight(
    tmp_path: Path,
) -> None:
    """The v2 layout, on a directory tree shaped like a delegated cgroup (this host may
    have only v1): the tenant's group enables the controllers and has the weight."""
    service = tmp_path / "service.scope"
    service.mkdir()
    (tmp_path / "cgroup.controllers").write_text("cpu pids memory\n")
    (service / "cgroup.subtree_control").write_text("cpu memory pids\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/service.scope\n")
    root = find_cgroup_root(tmp_path, proc, cpu_weight=250)
    assert root is not None and root.version == 2 and root.cpu == service
    command = CommandCgroup(root, Limits(processes=7, memory_bytes=4096), tenant="acme")
    tenant = service / tenant_group_name("acme")
    assert (tenant / "cpu.weight").read_text() == "250"
    assert (tenant / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"
    [made] = [path for path in tenant.iterdir() if path.is_dir()]
    assert (made / "pids.max").read_text() == "7"
    assert (made / "memory.max").read_text() == "4096"
    assert str(made / "cgroup.procs") in " ".join(command.join_argv())
    without = find_cgroup_root(tmp_path, proc)
    assert without is not None and without.cpu_setting() == ("cpu.weight", "100")
