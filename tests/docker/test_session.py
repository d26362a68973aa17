"""A whole Docker session: opened after its check, served by one container, released on close."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.proto.tools import ToolCall, ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.docker import OWNER_UID, containers_of


async def test_closing_a_docker_session_removes_its_container(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    workspace: Path,
    backend_name: str,
    engine: Any,
    owner: str,
) -> None:
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
        ran = await request(
            client,
            subjects.session_call(session.session_id),
            ToolCall(tool="shell", input={"command": "id -u"}),
            ToolOutput,
            timeout_s=60,
        )
        assert f"--- stdout\n{OWNER_UID}" in ran.text
        assert len(containers_of(engine, owner, session.session_id)) == 1
        await request(
            client,
            subjects.SESSION_CLOSE,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=60,
        )
        assert containers_of(engine, owner) == []
