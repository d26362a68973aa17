"""What one sandboxed run is given: workspace, network mode, limits, paths to hide."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from bastion.proto.sandbox import Limits
from bastion.shared.errors import InvalidInput
from bastion.shared.sandboxing.bridge import EgressBridge
from bastion.shared.sandboxing.hostids import HostIds
from bastion.shared.sandboxing.output import OutputTap

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
"""The sandbox's uid and gid inside; on the host it is `SandboxSpec.host_ids` (`hostids`)."""
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
    """Whether git's control files in the workspace stay writable (else read-only, as
    `gitguard` lists them)."""
    session_id: str = ""
    """The session the run belongs to; a backend that keeps a sandbox per session (Docker)
    keys on it, and gives a run without one a sandbox of its own."""
    tenant: str = "default"
    """Whose run it is: a backend that shares the CPU between tenants (bwrap's cgroups)
    runs it in its tenant's group."""
    skill_dir: Path | None = None
    """A checked, resolved skill directory shown read-only at `/skill` (`skill_run`)."""
    secret_environment: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Leased secrets, set as environment variables of this one command only. A backend
    never puts a value on a command line (which any host process may read) nor logs it."""
    bridge: EgressBridge | None = None
    """The `declared` network's way out: the egress bridge, for a run with no network of
    its own (`none`). Its grant is set in the environment like a secret, never on a
    command line."""
    workspace_shown: bool = True
    """False: the workspace is not bound and there is no `/workspace` (a `run_code`
    program sees none; `/tmp` is its home); the sandbox still runs as its owner."""
    host_ids: HostIds | None = None
    """The unprivileged host user bwrap runs as (`hostids.sandbox_ids`); None: a root
    service's bwrap backend runs it as the workspace's owner (refusing root), one that is
    not root as itself."""
    tap: OutputTap | None = field(default=None, compare=False, repr=False)
    """Given each chunk of the command's output as it is read (a streamed call); None: the
    output is only collected for the result."""


def parse_backend(backend: str, network: str) -> Network:
    """The network mode for a `bwrap` run, or an error saying why the pair is not run.

    `declared` runs as `none`: no network of its own; the egress bridge, when the command
    declared hosts, is added to the spec by the sandbox service.

    Raises:
        InvalidInput: an unknown backend or network name (a `docker:` backend is parsed by
            `docker_target.parse_docker_backend`).
    """
    if backend != "bwrap":
        raise InvalidInput(
            "the sandbox backend is `bwrap` or `docker:<image>@sha256:<digest>`: give one of those"
        )
    if network in ("none", "declared", "host"):
        return "host" if network == "host" else "none"
    raise InvalidInput(
        "bubblewrap takes the network mode none, declared or host, and no other: give one "
        "of those (a named network needs the Docker backend)"
    )
