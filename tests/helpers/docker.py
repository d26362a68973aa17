"""The Docker backend's tests' side: the test image (built when missing or stale), the
containers of an owner, and a way into the Docker sandbox that cleans up after itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors

from bastion.proto import subjects
from bastion.proto.sandbox import ExecResult, SandboxRelease, SandboxReleased
from bastion.shared.bus import Client, request
from bastion.shared.sandboxing.docker import LABEL_OWNER
from tests.helpers.sandbox import SESSION, Host, shell

__all__ = [
    "IMAGE",
    "OWNER_UID",
    "RECIPE",
    "Box",
    "containers_of",
    "ensure_image",
    "release",
]

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "docker" / "build_image.sh"


def _recipe() -> str:
    found = re.search(r"^RECIPE=(\d+)", BUILD_SCRIPT.read_text(), re.MULTILINE)
    assert found is not None, f"{BUILD_SCRIPT} sets no RECIPE"
    return found.group(1)


RECIPE = _recipe()
"""The build script's recipe: an image whose `io.bastion.test-image` label differs is stale."""
IMAGE = os.environ.get("BASTION_TEST_IMAGE", f"bastion-sandbox-test:bookworm-r{RECIPE}")
OWNER_UID = 1000 if os.geteuid() == 0 else os.geteuid()
"""Who owns the workspaces: an ordinary user (uid 1000) when tests run as root."""


def _labels(engine: Any, image: str) -> dict[str, str] | None:
    """The labels of `image` on the engine, or None when it has no such image."""
    try:
        found = engine.images.get(image)
    except docker.errors.ImageNotFound:
        return None
    return dict(found.labels or {})


def ensure_image(engine: Any, image: str = IMAGE) -> str:
    """The ID of the test image `image`, built first by `tests/docker/build_image.sh` when
    the engine has none or one of an older recipe; the build's progress goes to stderr.

    Raises `RuntimeError` saying what to do when the build fails."""
    labels = _labels(engine, image)
    if labels is None or labels.get("io.bastion.test-image") != RECIPE:
        why = "missing" if labels is None else f"stale: not of recipe {RECIPE}"
        print(  # noqa: T201  (progress on the terminal: the build takes minutes)
            f"building the Docker sandbox test image {image} ({why})", file=sys.stderr, flush=True
        )
        command = [str(BUILD_SCRIPT), *([] if labels is None else ["--rebuild"])]
        built = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "BASTION_TEST_IMAGE": image},
            check=False,
        )
        if built.returncode != 0:
            raise RuntimeError(
                f"building the Docker test image {image} failed (exit status "
                f"{built.returncode}; its output is above): fix what it says and run "
                "`just docker-image`, or run the tests where no Docker engine answers to skip "
                "the Docker tests"
            )
    return str(engine.images.get(image).id)


def containers_of(engine: Any, owner: str, session: str | None = None) -> list[Any]:
    """The containers labelled with `owner` (and `session`), running or not."""
    labels = [f"{LABEL_OWNER}={owner}"]
    if session is not None:
        labels.append(f"io.bastion.session={session}")
    return list(engine.containers.list(all=True, filters={"label": labels}))


async def release(client: Client, session: str) -> int:
    """Close a session as the orchestrator does: its container goes."""
    released = await request(
        client,
        subjects.SANDBOX_RELEASE,
        SandboxRelease(session_id=session),
        SandboxReleased,
        timeout_s=30,
    )
    return released.containers


@dataclass
class Box:
    """A way into the Docker sandbox that remembers which sessions it opened."""

    client: Client
    host: Host
    backend: str
    sessions: set[str] = field(default_factory=set)

    async def shell(self, command: str, session: str = SESSION, **fields: object) -> ExecResult:
        """Run `command` in the session's container, network `none`."""
        self.sessions.add(session)
        return await shell(
            self.client,
            self.host.workspace,
            command,
            session,
            backend=self.backend,
            network="none",
            **fields,
        )
