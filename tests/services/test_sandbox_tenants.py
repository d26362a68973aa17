"""A cap on each tenant's concurrent sandboxes: over it a call waits, a bounded time, then fails."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from bastion.proto import errors as codes
from bastion.proto.sandbox import ExecResult
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.sandbox import HELD, run_as_tenant, wait_for_file

SESSION = "0123456789abcdef"


@pytest.fixture
def settings(bus_settings: BusSettings, tmp_path: Path) -> SandboxSettings:
    (tmp_path / "state").mkdir()
    return SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(tmp_path / "state"),
        max_sandboxes_per_tenant=1,
    )


def workspace_named(tmp_path: Path, name: str) -> Path:
    return owned(tmp_path / name)


async def test_a_call_over_the_tenants_cap_waits_for_a_turn_then_runs(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, tmp_path: Path
) -> None:
    first, second = workspace_named(tmp_path, "a"), workspace_named(tmp_path, "b")
    results: dict[str, ExecResult] = {}

    async def hold() -> None:
        results["first"] = await run_as_tenant(client, first, HELD, "acme")

    async def follow() -> None:
        results["second"] = await run_as_tenant(client, second, "touch ran", "acme")

    async with run_service(sandbox_service, settings), anyio.create_task_group() as group:
        group.start_soon(hold)
        await anyio.to_thread.run_sync(wait_for_file, first / "started", 20.0)
        group.start_soon(follow)
        # The second is held back while the first runs; a third tenant is not.
        other = await run_as_tenant(client, workspace_named(tmp_path, "c"), "true", "globex")
        assert other.exit_status == 0
        assert not (second / "ran").exists()
        (first / "go").touch()
    assert results["second"].exit_status == 0
    assert (second / "ran").exists()


async def test_a_call_that_waits_past_the_bound_fails_saying_how_many_run_and_what_to_do(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, tmp_path: Path
) -> None:
    first, second = workspace_named(tmp_path, "a"), workspace_named(tmp_path, "b")
    short = msgspec.structs.replace(settings, tenant_wait_s=0.2)
    async with run_service(sandbox_service, short), anyio.create_task_group() as group:
        group.start_soon(run_as_tenant, client, first, HELD, "acme")
        await anyio.to_thread.run_sync(wait_for_file, first / "started", 20.0)
        with pytest.raises(RemoteError) as raised:
            await run_as_tenant(client, second, "touch ran", "acme")
        (first / "go").touch()
    assert raised.value.code == codes.UNAVAILABLE
    assert "tenant acme has 1 sandboxes running" in raised.value.message
    assert (
        "retry later, stop a background task no longer needed (each live one holds a "
        "sandbox: bg_list, bg_stop), or raise the cap (BASTION_MAX_SANDBOXES_PER_TENANT)"
        in raised.value.message
    )
    assert not (second / "ran").exists()
