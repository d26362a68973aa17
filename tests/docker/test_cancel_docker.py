"""Cancelling a call whose command runs in the session's Docker container: the exec'd
command and every process of it end, the call answers `cancelled`, the container serves
the session's next call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.session import OpenSession, SessionInfo
from bastion.proto.tools import CallResult, ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.cancels import call_with_id, cancel, until
from tests.helpers.docker import containers_of
from tests.helpers.sleepers import unique_duration


def _sleeping_in(container: Any, duration: str) -> bool:
    """Whether a `sleep <duration>` runs in the container (as `docker top` lists it)."""
    container.reload()
    if container.status != "running":
        return False
    listed = container.top(ps_args="-eo pid,args")
    return any(f"sleep {duration}" in " ".join(row) for row in listed.get("Processes") or [])


async def test_a_cancelled_command_in_a_docker_session_ends_with_its_processes(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    workspace: Path,
    backend_name: str,
    engine: Any,
    owner: str,
) -> None:
    duration = unique_duration()
    sandbox_settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"), docker_owner=owner
    )
    async with (
        run_service(policy_service, PolicySettings),
        run_service(sandbox_service, sandbox_settings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
    ):
        ask = msgspec.convert(
            {
                "agent": "tester",
                "workspace": str(workspace),
                "shell": True,
                "autonomy": "L3",
                "sandbox": backend_name,
            },
            OpenSession,
        )
        session = await request(client, subjects.SESSION_OPEN, ask, SessionInfo, timeout_s=60)
        sid = session.session_id
        results: list[CallResult] = []
        command = f"sleep {duration} & sleep {duration}; wait"  # a child of the shell too

        async def sleeper() -> None:
            results.append(await call_with_id(client, sid, "d-1", "shell", command=command))

        async with anyio.create_task_group() as group:
            group.start_soon(sleeper)
            await until(lambda: len(containers_of(engine, owner, sid)) == 1, "a container")
            [container] = containers_of(engine, owner, sid)
            await until(lambda: _sleeping_in(container, duration), "the sleep started", 1200)
            answer = await cancel(client, sid, "d-1", "cli:tester")
        await until(lambda: not _sleeping_in(container, duration), "the sleeps ended", 1200)
        after = await call_with_id(client, sid, "d-2", "shell", command="echo after")
    assert answer.outcome == "cancelled", answer.message
    [result] = results
    assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED, result
    assert isinstance(after, ToolOutput) and "after" in after.text
