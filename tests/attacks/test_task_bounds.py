"""What an agent could try against the bounds and answers of background tasks: run more
process trees than its tenant's sandbox cap by starting tasks, get a secret past the task
log's cuts by pausing in the middle of it, and be told a task did not start when it did,
or was stopped when it still runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session
from tests.helpers.vault import add, key_file, vault_settings


async def tool(client: Client, session_id: str, name: str, **given: Any) -> Any:
    """A call's answer, decoded from the JSON the model is shown."""
    result = await call(client, session_id, name, **given)
    assert isinstance(result, ToolOutput), result
    return json.loads(result.text)


@pytest.fixture
def plane_with(
    run_service: ServiceRunner, bus_settings: BusSettings, sandbox_state_dir: Path, tmp_path: Path
) -> Any:
    """`async with plane_with(sandbox={...}, orchestrator={...})`: vault, sandbox,
    orchestrator and policy on the test's NATS, the sandbox and orchestrator with these
    settings."""

    @asynccontextmanager
    async def running(
        sandbox: dict[str, Any] | None = None, orchestrator: dict[str, Any] | None = None
    ) -> AsyncIterator[None]:
        url = bus_settings.nats_url
        async with (
            run_service(vault_service, vault_settings(url, key_file(tmp_path / "vault"))),
            run_service(
                sandbox_service,
                SandboxSettings(nats_url=url, state_dir=str(sandbox_state_dir), **(sandbox or {})),
            ),
            run_service(
                orchestrator_service, OrchestratorSettings(nats_url=url, **(orchestrator or {}))
            ),
            run_service(policy_service, PolicySettings),
        ):
            yield

    return running


async def test_background_tasks_count_among_the_tenants_sandboxes(
    client: Client, plane_with: Any, workspace: Path
) -> None:
    """Each live task is a process tree with a command's limits: with the tenant's cap of
    two sandboxes held by two tasks, neither a command nor a third task runs beside them,
    and stopping one lets a command run."""
    async with plane_with(sandbox={"max_sandboxes_per_tenant": 2, "tenant_wait_s": 0}):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        first = await tool(client, sid, "bg_run", command="sleep 341")
        await tool(client, sid, "bg_run", command="sleep 342")
        command = await call(client, sid, "shell", command="echo ran")
        third = await call(client, sid, "bg_run", command="sleep 343")
        await tool(client, sid, "bg_stop", id=first["id"])
        after = await call(client, sid, "shell", command="echo ran")
        listed = await tool(client, sid, "bg_list")
    for refused in (command, third):
        assert isinstance(refused, ErrorReply) and refused.code == "unavailable", refused
        assert "2 sandboxes running, its cap" in refused.message
        assert "bg_stop" in refused.message
    assert isinstance(after, ToolOutput) and "ran" in after.text
    assert sorted(t["status"] for t in listed["tasks"]) == ["cancelled", "running"]


VALUE = "Zq8-task-log-secret-4471"


async def test_a_value_split_by_a_pause_in_a_tasks_output_is_cut_on_disk_and_in_every_page(
    client: Client, plane_with: Any, workspace: Path, sandbox_state_dir: Path
) -> None:
    """A task prints a value's first 9 characters, pauses, then the rest: the log must not
    decide the first half by the pause, so neither the file under the state dir nor any
    page of `bg_output` (read in small pages) holds the value, nor its halves side by side."""
    (workspace / "s.txt").write_text(VALUE)
    owned(workspace)
    async with plane_with():
        await add(client, "TOKEN", VALUE.encode())
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        started = await tool(
            client, sid, "bg_run", command="head -c 9 s.txt; sleep 1.5; tail -c +10 s.txt"
        )
        pages, offset = [], 0
        while True:
            got = await tool(client, sid, "bg_output", id=started["id"], offset=offset, limit=15)
            pages.append(got["text"])
            offset = got["next_offset"]
            if got["eof"]:
                break
            if not got["text"]:
                await anyio.sleep(0.05)
    on_disk = [p.read_text() for p in (sandbox_state_dir / "tasks").rglob("*.log")]
    shown = "".join(pages)
    assert on_disk == ["[secret TOKEN]"], on_disk
    assert shown == "[secret TOKEN]", pages
    assert VALUE[:9] not in shown and VALUE[9:] not in shown
