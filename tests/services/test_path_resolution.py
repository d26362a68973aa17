"""`sandbox.resolve`: the paths a file call touches, after the workspace's links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bastion.proto import subjects
from bastion.proto.sandbox import ResolvedPaths, ResolvePaths
from bastion.sandbox.resolving import resolve_paths
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import InvalidInput
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

SESSION = "0123456789abcdef"


@pytest.fixture
def linked_workspace(tmp_path: Path) -> Path:
    """A workspace whose links lead inside it, out of it, and to an absolute path."""
    root = tmp_path / "work"
    (root / "notes").mkdir(parents=True)
    (root / "secrets").mkdir()
    (root / "notes" / "up").symlink_to("..")
    (root / "notes" / "key").symlink_to("../secrets/key")
    (root / "docs").symlink_to("/workspace/secrets")
    os.chown(root, 1000, 1000)
    return root


def resolved(workspace: Path, *paths: str, patch: str = "") -> tuple[str, ...]:
    ask = ResolvePaths(session_id=SESSION, workspace=str(workspace), paths=paths, patch=patch)
    return resolve_paths(workspace, ask)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("notes/a.md", "notes/a.md"),
        ("./notes/a.md", "notes/a.md"),
        ("/workspace/notes/a.md", "notes/a.md"),
        ("notes/up/planted.md", "planted.md"),
        ("notes/up/notes/up/secrets/x", "secrets/x"),
        ("notes/key", "secrets/key"),
        ("docs/k", "secrets/k"),
        ("notes/new/deeper/a.md", "notes/new/deeper/a.md"),
        ("notes/up/new/a.md", "new/a.md"),
        (".", "."),
        ("notes", "notes"),
    ],
)
def test_a_path_resolves_where_the_file_tools_would_land(
    linked_workspace: Path, path: str, expected: str
) -> None:
    assert resolved(linked_workspace, path) == (expected,)


def test_a_patchs_paths_are_resolved_in_order(linked_workspace: Path) -> None:
    patch = (
        "*** Begin Patch\n*** Add File: notes/a.md\n+a\n*** Add File: notes/up/b.md\n+b\n"
        "*** Update File: notes/key\n*** Move to: notes/moved\n@@\n-x\n+y\n*** End Patch\n"
    )
    assert resolved(linked_workspace, patch=patch) == (
        "notes/a.md",
        "b.md",
        "secrets/key",
        "notes/moved",
    )


@pytest.mark.parametrize("path", ["../outside", "notes/up/../x", "/etc/passwd"])
def test_a_path_leading_out_of_the_workspace_is_refused(linked_workspace: Path, path: str) -> None:
    with pytest.raises(InvalidInput):
        resolved(linked_workspace, path)


async def test_the_sandbox_service_answers_resolve_on_the_bus(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, linked_workspace: Path
) -> None:
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(linked_workspace.parent / "st")
    )
    async with run_service(sandbox_service, settings):
        answer = await request(
            client,
            subjects.SANDBOX_RESOLVE,
            ResolvePaths(
                session_id=SESSION, workspace=str(linked_workspace), paths=("notes/up/x",)
            ),
            ResolvedPaths,
            timeout_s=10,
        )
    assert answer.paths == ("x",)
