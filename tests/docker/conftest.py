"""Fixtures for the Docker backend: a reachable engine and the locally built test image.

Without an engine, or without the image (`just docker-image` builds it), these tests skip
and say why; CI provides both.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from bastion.shared.sandboxing import SandboxFailed
from bastion.shared.sandboxing.docker import LABEL_OWNER
from bastion.shared.sandboxing.docker_engine import DockerEngine

IMAGE = os.environ.get("BASTION_TEST_IMAGE", "bastion-sandbox-test:bookworm-r2")
OWNER_UID = 1000 if os.geteuid() == 0 else os.geteuid()
"""Who owns the workspaces: an ordinary user (uid 1000) when tests run as root."""


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    # Asked first through the backend's own engine, which probes the socket itself: the
    # SDK leaves a socket open when no engine answers, and that would fail the whole run
    # on an unraisable ResourceWarning.
    try:
        DockerEngine().ping()
    except SandboxFailed as error:
        pytest.skip(f"no Docker engine answers: {error.message}")
    client = docker.from_env(timeout=30)
    yield client
    client.close()


@pytest.fixture(scope="session")
def image_id(engine: Any) -> str:
    try:
        return str(engine.images.get(IMAGE).id)
    except docker.errors.ImageNotFound:
        pytest.skip(f"the test image {IMAGE} is not built: run `just docker-image`")


@pytest.fixture
def backend_name(image_id: str) -> str:
    """The pinned backend string of the test image: its name and its image ID."""
    return f"docker:bastion-sandbox-test@{image_id}"


@pytest.fixture
def owner(engine: Any) -> Iterator[str]:
    """An owner label of this test's own, its containers removed afterwards."""
    name = f"test-{secrets.token_hex(6)}"
    yield name
    for container in engine.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={name}"}):
        container.remove(force=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace belonging to an ordinary user: `OWNER_UID`."""
    path = tmp_path / "workspace"
    path.mkdir()
    if os.geteuid() == 0:
        os.chown(path, OWNER_UID, OWNER_UID)
    return path


def containers_of(engine: Any, owner: str, session: str | None = None) -> list[Any]:
    """The containers labelled with `owner` (and `session`), running or not."""
    labels = [f"{LABEL_OWNER}={owner}"]
    if session is not None:
        labels.append(f"io.bastion.session={session}")
    return list(engine.containers.list(all=True, filters={"label": labels}))
