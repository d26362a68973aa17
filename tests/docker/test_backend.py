"""The Docker backend itself: the container it builds, the limits it keeps, what it refuses."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bastion.proto.sandbox import ExecResult, Limits
from bastion.shared.errors import InvalidInput
from bastion.shared.sandboxing import (
    ContainerLimits,
    DockerSandboxes,
    SandboxFailed,
    SandboxSpec,
    parse_docker_backend,
)
from tests.helpers.docker import OWNER_UID, containers_of

SESSION = "0123456789abcdef"
MiB = 1024 * 1024


@pytest.fixture
async def sandboxes(owner: str) -> AsyncIterator[DockerSandboxes]:
    boxes = DockerSandboxes(owner, ContainerLimits(memory_bytes=256 * MiB, pids=64))
    yield boxes
    await boxes.aclose()


async def run(
    sandboxes: DockerSandboxes,
    backend_name: str,
    workspace: Path,
    command: str,
    network: str = "none",
    session: str = SESSION,
    **limits: Any,
) -> ExecResult:
    backend = sandboxes.backend(parse_docker_backend(backend_name, network))
    spec = SandboxSpec(workspace=workspace, limits=Limits(**limits), session_id=session)
    return await backend.run(spec, command)


async def test_a_command_runs_as_the_workspace_owner_and_what_it_writes_is_theirs(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(sandboxes, backend_name, workspace, "id -u; id -g; echo $HOME; pwd; > made")
    assert result.stdout == f"{OWNER_UID}\n{OWNER_UID}\n/workspace\n/workspace\n"
    made = (workspace / "made").stat()
    assert (made.st_uid, made.st_gid) == (OWNER_UID, OWNER_UID)


async def test_a_tap_is_given_every_chunk_of_both_streams_from_the_reading_thread(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    tapped: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

    def tap(stream: str, chunk: bytes) -> None:
        tapped[stream] += chunk

    backend = sandboxes.backend(parse_docker_backend(backend_name, "none"))
    spec = SandboxSpec(workspace=workspace, session_id=SESSION, tap=tap)
    result = await backend.run(spec, "for i in 1 2 3; do echo out-$i; echo err-$i >&2; done")
    assert bytes(tapped["stdout"]) == b"out-1\nout-2\nout-3\n" == result.stdout.encode()
    assert bytes(tapped["stderr"]) == b"err-1\nerr-2\nerr-3\n" == result.stderr.encode()


async def test_the_system_is_read_only_and_tmp_is_a_private_writable_tmpfs(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(
        sandboxes,
        backend_name,
        workspace,
        "touch /usr/x; touch /x; echo ok > /tmp/y && cat /tmp/y; grep ' /tmp ' /proc/mounts",
    )
    assert "cannot touch '/usr/x': Read-only file system" in result.stderr
    assert "cannot touch '/x': Read-only file system" in result.stderr
    assert result.stdout.startswith("ok\ntmpfs /tmp tmpfs rw,nosuid,nodev")
    assert "size=262144k" in result.stdout


async def test_the_command_has_no_capabilities_and_cannot_gain_privileges(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(
        sandboxes,
        backend_name,
        workspace,
        "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status",
    )
    assert result.stdout == (
        "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n"
    )


async def test_the_environment_is_the_small_allowlist(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BASTION_NATS_PASSWORD", "hunter2")
    result = await run(sandboxes, backend_name, workspace, "env | cut -d= -f1 | sort")
    assert result.stdout.split() == ["HOME", "HOSTNAME", "LANG", "PATH", "PWD", "TERM", "TMPDIR"]


async def test_without_a_network_a_connection_fails_and_only_loopback_exists(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(
        sandboxes,
        backend_name,
        workspace,
        "ls /sys/class/net; python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), "
        'timeout=5)" || echo no-network',
    )
    assert result.stdout == "lo\nno-network\n"
    assert "Network is unreachable" in result.stderr


async def test_one_container_serves_every_call_of_a_session(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path, engine: Any, owner: str
) -> None:
    first = await run(sandboxes, backend_name, workspace, "echo kept > /tmp/kept; hostname")
    second = await run(sandboxes, backend_name, workspace, "cat /tmp/kept")
    assert second.stdout == "kept\n"
    assert len(containers_of(engine, owner, SESSION)) == 1
    other = await run(sandboxes, backend_name, workspace, "cat /tmp/kept", session="f" * 16)
    assert "No such file" in other.stderr
    assert first.stdout == "sandbox\n"


async def test_a_container_stopped_behind_the_sessions_back_is_replaced_and_removed(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path, engine: Any, owner: str
) -> None:
    # A held container is used without inspecting it first: the exec finds it stopped.
    await run(sandboxes, backend_name, workspace, "echo kept > /tmp/kept")
    [stopped] = containers_of(engine, owner, SESSION)
    await anyio.to_thread.run_sync(lambda: stopped.stop(timeout=0))
    result = await run(sandboxes, backend_name, workspace, "ls -A /tmp; echo ran")
    assert (result.exit_status, result.stdout) == (0, "ran\n")  # a new container
    [fresh] = containers_of(engine, owner, SESSION)  # the stopped one was removed
    assert fresh.id != stopped.id


async def test_release_removes_the_sessions_container_and_only_it(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path, engine: Any, owner: str
) -> None:
    await run(sandboxes, backend_name, workspace, "true")
    await run(sandboxes, backend_name, workspace, "true", session="f" * 16)
    assert await sandboxes.release(SESSION) == 1
    assert containers_of(engine, owner, SESSION) == []
    assert len(containers_of(engine, owner)) == 1
    assert await sandboxes.release(SESSION) == 0


async def test_a_new_instance_removes_the_leftovers_of_a_killed_one(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path, engine: Any, owner: str
) -> None:
    await run(sandboxes, backend_name, workspace, "true")  # then its service "dies"
    restarted = DockerSandboxes(owner)
    assert await restarted.sweep() == 1
    assert containers_of(engine, owner) == []
    result = await run(sandboxes, backend_name, workspace, "echo again")
    assert result.stdout == "again\n"  # a container gone underneath is started anew
    await restarted.aclose()


async def test_a_command_past_its_wall_clock_is_killed_with_what_it_started(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(
        sandboxes, backend_name, workspace, "setsid sleep 3600 & echo started; sleep 3600", wall_s=1
    )
    assert (result.ended, result.signal, result.exit_status) == ("timeout", 9, 137)
    assert result.stdout == "started\n"
    after = await run(sandboxes, backend_name, workspace, "grep -l '^sleep' /proc/[0-9]*/comm")
    assert after.stdout.count("\n") == 1  # only the init's own sleep is left


async def test_output_beyond_the_limit_is_cut_in_the_middle_and_counted(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(
        sandboxes,
        backend_name,
        workspace,
        "head -c 100000 /dev/zero | tr '\\0' x",
        output_bytes=1024,
    )
    assert result.stdout_cut == 100000 - 1024
    assert "[... 98976 bytes cut ...]" in result.stdout


async def test_cpu_seconds_and_file_size_are_the_commands_limits(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(
        sandboxes, backend_name, workspace, "ulimit -t; ulimit -f", cpu_s=7, file_size_bytes=MiB
    )
    assert result.stdout == f"7\n{MiB // 512}\n"


async def test_the_pids_limit_stops_a_fork_bomb(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(sandboxes, backend_name, workspace, "bash -c ':(){ :|:& };:'", wall_s=5)
    assert "fork" in result.stderr and "Resource temporarily unavailable" in result.stderr
    assert (await anyio.run_process(["true"])).returncode == 0  # the host forks on
    assert await sandboxes.release(SESSION) == 1
    assert (await run(sandboxes, backend_name, workspace, "echo fresh")).stdout == "fresh\n"


async def test_the_memory_limit_kills_a_command_that_exceeds_it(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    result = await run(
        sandboxes, backend_name, workspace, "python3 -c 'b = bytearray(1024 * 1024 * 1024)'"
    )
    assert (result.ended, result.signal) == ("signal", 9)


async def test_a_missing_image_is_a_clear_error_naming_its_digest(
    sandboxes: DockerSandboxes, workspace: Path, engine: Any
) -> None:
    missing = "docker:nowhere/nothing@sha256:" + "0" * 64
    with pytest.raises(SandboxFailed) as raised:
        await run(sandboxes, missing, workspace, "true")
    assert "never pulls" in raised.value.message
    assert "sha256:" + "0" * 64 in raised.value.message


async def test_a_network_that_does_not_exist_is_a_clear_error(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path
) -> None:
    with pytest.raises(
        InvalidInput, match=r"no Docker network 'nowhere-net'.*docker network create"
    ):
        await run(sandboxes, backend_name, workspace, "true", network="nowhere-net")


async def test_a_workspace_owned_by_root_is_refused(
    sandboxes: DockerSandboxes, backend_name: str, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can make a workspace that root owns")
    with pytest.raises(InvalidInput, match="belongs to root"):
        await run(sandboxes, backend_name, tmp_path, "true")


async def test_the_check_runs_true_in_a_throwaway_container(
    sandboxes: DockerSandboxes, backend_name: str, workspace: Path, engine: Any, owner: str
) -> None:
    backend = sandboxes.backend(parse_docker_backend(backend_name, "none"))
    detail = await backend.check(SandboxSpec(workspace=workspace))
    assert f"`true` ran as uid {OWNER_UID} in /workspace, network none" in detail
    assert containers_of(engine, owner) == []
