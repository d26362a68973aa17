"""The sandbox service with a Docker backend, through the bus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bastion.proto import subjects
from bastion.proto.sandbox import (
    ExecRequest,
    ExecResult,
    SandboxCheck,
    SandboxReady,
    SandboxRelease,
    SandboxReleased,
)
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.sandboxing import DockerSandboxes, SandboxSpec, parse_docker_backend
from tests.helpers.bus import ServiceRunner
from tests.helpers.docker import OWNER_UID, containers_of

SESSION = "0123456789abcdef"


async def shell(
    client: Client, workspace: Path, backend: str, command: str, network: str = "none"
) -> ExecResult:
    message = ExecRequest(
        session_id=SESSION,
        workspace=str(workspace),
        command=command,
        backend=backend,
        network=network,
    )
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, message, ExecResult, timeout_s=60
    )
    return result


async def test_a_docker_session_runs_as_the_workspace_owner_in_one_kept_container(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    first = await shell(client, workspace, backend_name, "id -u; echo kept > /tmp/kept")
    second = await shell(client, workspace, backend_name, "cat /tmp/kept")
    assert first.stdout == f"{OWNER_UID}\n"
    assert second.stdout == "kept\n"
    assert len(containers_of(engine, owner, SESSION)) == 1


async def test_release_through_the_bus_removes_the_sessions_container(
    client: Client, sandbox: None, workspace: Path, backend_name: str, engine: Any, owner: str
) -> None:
    await shell(client, workspace, backend_name, "true")
    released = await request(
        client,
        subjects.SANDBOX_RELEASE,
        SandboxRelease(session_id=SESSION),
        SandboxReleased,
        timeout_s=30,
    )
    assert released.containers == 1
    assert containers_of(engine, owner) == []


async def test_the_service_removes_its_owners_leftovers_when_it_starts(
    run_service: ServiceRunner,
    settings: SandboxSettings,
    workspace: Path,
    backend_name: str,
    engine: Any,
    owner: str,
) -> None:
    killed = DockerSandboxes(owner)  # an executor that dies without releasing anything
    backend = killed.backend(parse_docker_backend(backend_name, "none"))
    await backend.run(SandboxSpec(workspace=workspace, session_id=SESSION), "true")
    await killed.aclose()
    assert len(containers_of(engine, owner)) == 1
    async with run_service(sandbox_service, settings):
        assert containers_of(engine, owner) == []


async def test_the_check_says_which_engine_image_and_user_ran_true(
    client: Client, sandbox: None, workspace: Path, backend_name: str
) -> None:
    ready = await request(
        client,
        subjects.SANDBOX_CHECK,
        SandboxCheck(workspace=str(workspace), backend=backend_name),
        SandboxReady,
        timeout_s=60,
    )
    assert ready.detail.startswith("Docker ")
    assert f"`true` ran as uid {OWNER_UID} in /workspace, network none" in ready.detail


@pytest.mark.parametrize(
    ("backend", "network", "words"),
    [
        ("docker:alpine:3.20", "none", "alpine:3.20 is not pinned by digest: give name@sha256"),
        ("docker:alpine@sha256:" + "0" * 64, "host", "`host` network is the machine's own"),
        ("docker:alpine@sha256:" + "0" * 64, "bridge", "default `bridge` network"),
        ("bwrap", "egress-net", "bubblewrap takes the network mode none, declared or host"),
    ],
)
async def test_unpinned_images_and_mismatched_networks_are_invalid_input(
    client: Client, sandbox: None, workspace: Path, backend: str, network: str, words: str
) -> None:
    with pytest.raises(RemoteError) as raised:
        await shell(client, workspace, backend, "true", network=network)
    assert raised.value.code == "invalid_input"
    assert words in raised.value.message


async def test_a_missing_image_is_a_sandbox_failure_saying_to_load_it(
    client: Client, sandbox: None, workspace: Path
) -> None:
    with pytest.raises(RemoteError) as raised:
        await shell(client, workspace, "docker:nowhere/nothing@sha256:" + "0" * 64, "true")
    assert raised.value.code == "sandbox_failed"
    assert "never pulls" in raised.value.message and "docker load" in raised.value.message
