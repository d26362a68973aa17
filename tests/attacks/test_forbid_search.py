"""A Cedar `forbid` on a path keeps the file from a search or a listing too: a search that
shows a file's lines reads it, and a listing shows that it is there. The whole plane runs
(policy with the operator's file, sandbox, orchestrator) on a real NATS and real bwrap."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import msgspec
import pytest

from bastion.orchestrator.service import OrchestratorSettings, orchestrator_service
from bastion.policy.service import PolicySettings, policy_service
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import SandboxSettings, sandbox_service
from bastion.shared.bus import Client
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session

NO_SECRETS = """
@id("no-secrets")
@reason("secrets/ holds the deploy keys")
forbid (principal, action == Action::"read", resource is Path)
when { context.target like "secrets/*" };
"""

REVIEW_DRAFTS = """
@id("review-drafts")
@ask("drafts are read only once a person agrees")
forbid (principal, action == Action::"read", resource is Path)
when { context.target like "drafts/*" };
"""

Plane = Callable[[], AbstractAsyncContextManager[None]]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chown(path.parent, 1000, 1000)
    os.chown(path, 1000, 1000)


@pytest.fixture
def seeded_workspace(tmp_path: Path) -> Path:
    root = owned(tmp_path / "workspace")
    _write(root / "secrets" / "deploy.txt", "TOKEN=deploy-key-0123\n")
    _write(root / "drafts" / "plan.txt", "TOKEN=draft-plan\n")
    _write(root / "notes" / "todo.txt", "TOKEN=public-note\n")
    return root


@pytest.fixture
def forbidding_plane(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> Plane:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "paths.cedar").write_text(NO_SECRETS + REVIEW_DRAFTS)
    state = str(tmp_path / "state")

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        policy = PolicySettings(
            **msgspec.structs.asdict(bus_settings), state_dir=state, policy_dir=str(policies)
        )
        async with (
            run_service(policy_service, policy),
            run_service(
                sandbox_service, SandboxSettings(nats_url=bus_settings.nats_url, state_dir=state)
            ),
            run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        ):
            yield

    return running


def _text(result: object) -> str:
    assert isinstance(result, ToolOutput), result
    return result.text


async def test_a_search_shows_no_line_of_a_file_an_operator_forbids_reading(
    client: Client, forbidding_plane: Plane, seeded_workspace: Path
) -> None:
    async with forbidding_plane():
        sid = (
            await open_session(client, workspace=str(seeded_workspace), autonomy="L3")
        ).session_id
        read = await call(client, sid, "read_file", path="secrets/deploy.txt")
        found = _text(await call(client, sid, "search_files", pattern="TOKEN"))
        inside = _text(await call(client, sid, "search_files", pattern="TOKEN", path="secrets"))
    assert isinstance(read, ErrorReply) and read.code == "denied"  # as a read, it is refused
    assert "notes/todo.txt:1: TOKEN=public-note" in found
    assert "deploy-key" not in found and "secrets/" not in found
    # A file a person must approve reading is not shown unasked either.
    assert "draft-plan" not in found and "drafts/" not in found
    assert "deploy-key" not in inside and inside.startswith("no lines match")


async def test_a_listing_or_a_find_does_not_name_a_file_an_operator_forbids_reading(
    client: Client, forbidding_plane: Plane, seeded_workspace: Path
) -> None:
    async with forbidding_plane():
        sid = (
            await open_session(client, workspace=str(seeded_workspace), autonomy="L3")
        ).session_id
        everything = _text(await call(client, sid, "find_files", pattern="**/*.txt"))
        listed = _text(await call(client, sid, "list_files", path="secrets"))
        top = _text(await call(client, sid, "list_files"))
    assert everything.splitlines() == ["notes/todo.txt"]
    assert "deploy.txt" not in listed and listed == "secrets is empty"
    assert "notes/" in top.splitlines()  # directories stay listed: no policy names them


async def test_without_operator_policies_nothing_is_hidden(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    seeded_workspace: Path,
    tmp_path: Path,
) -> None:
    state = str(tmp_path / "state")
    async with (
        run_service(
            policy_service, PolicySettings(**msgspec.structs.asdict(bus_settings), state_dir=state)
        ),
        run_service(
            sandbox_service, SandboxSettings(nats_url=bus_settings.nats_url, state_dir=state)
        ),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
    ):
        sid = (
            await open_session(client, workspace=str(seeded_workspace), autonomy="L3")
        ).session_id
        found = _text(await call(client, sid, "find_files", pattern="**/*.txt"))
    assert found.splitlines() == ["drafts/plan.txt", "notes/todo.txt", "secrets/deploy.txt"]
