"""Sandboxes for commands and stdio servers, shared by the sandbox and mcp services.

Modules:
- `spec`: what one run is given (workspace, network mode, limits, hidden paths) and the
  parsing of backend and network names.
- `backend`: the `SandboxBackend` protocol every backend implements.
- `bwrap`: the bubblewrap backend and what its exit statuses mean.
- `warm`: a session's warm bubblewrap sandbox, kept between its commands, and the sweep.
- `warm_init`: the program run as pid 1 inside a warm sandbox (not imported: its text is).
- `docker`: the Docker backend, one container per session (`DockerSandboxes`).
- `docker_target`: the pinned image and network a `docker:` backend names.
- `docker_engine`: the one module speaking to the Docker SDK.
- `argv`: the `prlimit` + `bwrap` command line.
- `cgroup`: a cgroup per command bounding processes and memory, and which bound it hit.
- `etc`: the sandbox's minimal `/etc`.
- `hostids`: the unprivileged host user a sandbox runs as (never root), and dropping to it.
- `process`: a process in its own session, under a wall clock, its output capped.
- `output`: one stream kept within a byte budget, head and tail.
- `errors`: `SandboxFailed`, for a sandbox that did not start.
"""

from __future__ import annotations

from bastion.shared.sandboxing.backend import SandboxBackend
from bastion.shared.sandboxing.bwrap import BwrapBackend
from bastion.shared.sandboxing.docker import ContainerLimits, DockerBackend, DockerSandboxes
from bastion.shared.sandboxing.docker_target import DockerTarget, parse_docker_backend
from bastion.shared.sandboxing.errors import SandboxFailed
from bastion.shared.sandboxing.hostids import HostIds, configured_ids, sandbox_ids
from bastion.shared.sandboxing.spec import (
    SANDBOX_UID,
    WORKSPACE,
    Network,
    SandboxSpec,
    parse_backend,
)

__all__ = [
    "SANDBOX_UID",
    "WORKSPACE",
    "BwrapBackend",
    "ContainerLimits",
    "DockerBackend",
    "DockerSandboxes",
    "DockerTarget",
    "HostIds",
    "Network",
    "SandboxBackend",
    "SandboxFailed",
    "SandboxSpec",
    "configured_ids",
    "parse_backend",
    "parse_docker_backend",
    "sandbox_ids",
]
