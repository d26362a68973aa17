"""The seam the sandbox service runs each command through: the bubblewrap or Docker backend."""

from __future__ import annotations

from typing import Protocol

from bastion.proto.sandbox import ExecResult
from bastion.shared.sandboxing.spec import SandboxSpec

__all__ = ["SandboxBackend"]


class SandboxBackend(Protocol):
    """Runs one shell command in a fresh sandbox built from a `SandboxSpec`.

    A backend does not know sessions, policy or what a command is for, and does not check
    the workspace: its caller hands it a workspace already checked. It answers a command
    that failed with an `ExecResult` like any other, and raises `SandboxFailed` only when
    the sandbox itself could not be started.
    """

    name: str

    async def run(self, spec: SandboxSpec, command: str) -> ExecResult:
        """Run `command` with `/bin/sh -c` in `/workspace`, within `spec.limits`."""
        ...

    async def check(self, spec: SandboxSpec) -> str:
        """Run a trivial command; a sentence saying what ran, or `SandboxFailed`."""
        ...
