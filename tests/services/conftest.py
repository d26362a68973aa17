"""Fixtures of the services' tests that more than one module uses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.vault import key_file, vault_settings


@pytest.fixture
def plane_with_vault(
    run_service: ServiceRunner, bus_settings: BusSettings, sandbox_state_dir: Path, tmp_path: Path
) -> Plane:
    """`async with plane_with_vault()`: vault (its key in `tmp_path/vault`), policy, sandbox
    and orchestrator on the test's NATS, fresh each time it is entered."""

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        url = bus_settings.nats_url
        async with (
            run_service(vault_service, vault_settings(url, key_file(tmp_path / "vault"))),
            run_service(
                sandbox_service, SandboxSettings(nats_url=url, state_dir=str(sandbox_state_dir))
            ),
            run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
            run_service(policy_service, PolicySettings),
        ):
            yield

    return running
