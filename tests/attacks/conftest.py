"""What every attack needs: a running sandbox service, a way in, and a host to check after.

The way in (`shell`, `read`, `write`) and the `Host` are in `tests.helpers.sandbox`; the
Docker fixtures (`engine`, `image_id`, `backend_name`, `owner`) in `tests/conftest.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.sandbox import CANARY, SECRET, SECRET_ENV, Host


@pytest.fixture
def host(tmp_path: Path, workspace: Path) -> Iterator[Host]:
    """The host as an attack finds it: the test's `workspace`, a state dir with a key, and a
    canary beside them; afterwards, nothing outside the workspace may have changed."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "sessions.key").write_text("state secret\n")
    canary = tmp_path / "outside.txt"
    canary.write_text(CANARY)
    made = Host(tmp_path, workspace, state_dir, canary, frozenset())
    made.before = made.listing()
    yield made
    made.assert_unchanged()


@pytest.fixture
def settings(bus_settings: BusSettings, host: Host) -> SandboxSettings:
    """The sandbox service's settings: the test's NATS, the host's state dir."""
    return SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(host.state_dir))


@pytest.fixture
async def sandbox(
    run_service: ServiceRunner, settings: SandboxSettings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    """The sandbox service running in this process, `SECRET_ENV` set in its environment."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    async with run_service(sandbox_service, settings):
        yield
