"""What one sandboxed run is given: workspace, network mode, limits, paths to hide."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from bastion.proto.sandbox import Limits
from bastion.shared.errors import InvalidInput, NotImplementedYet

__all__ = [
    "SANDBOX_GID",
    "SANDBOX_UID",
    "SANDBOX_USER",
    "SKILL_MOUNT",
    "WORKSPACE",
    "Network",
    "SandboxSpec",
    "parse_backend",
]

SANDBOX_UID: Final = 10001
SANDBOX_GID: Final = 10001
SANDBOX_USER: Final = "sandbox"
WORKSPACE: Final = "/workspace"
"""Where the workspace appears inside every sandbox."""
SKILL_MOUNT: Final = "/skill"
"""Where a running skill's directory appears, read-only (`skill_run`)."""

Network = Literal["none", "host"]
"""The network modes bubblewrap runs today: loopback only, or the machine's own."""


@dataclass(frozen=True)
class SandboxSpec:
    """One run's sandbox: `workspace` is a checked, resolved host directory."""

    workspace: Path
    network: Network = "none"
    limits: Limits = field(default_factory=Limits)
    hidden: tuple[Path, ...] = ()
    """Host paths masked with an empty read-only directory should a bound tree hold them."""
    read_only: tuple[Path, ...] = ()
    """Checked, resolved host directories shown read-only, each at its own path."""
    git_writable: bool = False
    """Whether the workspace's `.git/hooks` and `.git/config` stay writable (else read-only)."""
    session_id: str = ""
    """The session the run belongs to; a backend that keeps a sandbox per session (Docker)
    keys on it, and gives a run without one a sandbox of its own."""
    skill_dir: Path | None = None
    """A checked, resolved skill directory shown read-only at `/skill` (`skill_run`)."""
    secret_environment: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Leased secrets, set as environment variables of this one command only. A backend
    never puts a value on a command line (which any host process may read) nor logs it."""


def parse_backend(backend: str, network: str) -> Network:
    """The network mode for a `bwrap` run, or an error saying why the pair is not run.

    Raises:
        NotImplementedYet: the `declared` network (issue 5).
        InvalidInput: an unknown backend or network name (a `docker:` backend is parsed by
            `docker_target.parse_docker_backend`).
    """
    if backend != "bwrap":
        raise InvalidInput(
            "the sandbox backend is `bwrap` or `docker:<image>@sha256:<digest>`: give one of those"
        )
    if network == "declared":
        raise NotImplementedYet(
            "the `declared` network (only a skill's declared hosts, through the egress proxy) "
            "is not built yet (issue 5): use `none`, or `host` to share the machine's network"
        )
    if network in ("none", "host"):
        return "none" if network == "none" else "host"
    raise InvalidInput(
        "bubblewrap takes the network mode none, declared or host, and no other: give one "
        "of those (a named network needs the Docker backend)"
    )
