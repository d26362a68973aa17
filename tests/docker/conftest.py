"""The Docker tests' running sandbox service (`sandbox`) and its `settings`: a state dir of
the test's own and the test's container owner label, so its containers are removed after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner


@pytest.fixture
def settings(bus_settings: BusSettings, tmp_path: Path, owner: str) -> SandboxSettings:
    state = tmp_path / "state"
    state.mkdir()
    return SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(state), docker_owner=owner)


@pytest.fixture
async def sandbox(run_service: ServiceRunner, settings: SandboxSettings) -> AsyncIterator[None]:
    async with run_service(sandbox_service, settings):
        yield
