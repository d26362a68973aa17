"""The sandbox service's settings: the programs that build a sandbox, and what the operator
lifts or caps."""

from __future__ import annotations

import socket
from typing import Annotated

import msgspec

from bastion.proto import subjects
from bastion.shared.sandboxing import ContainerLimits
from bastion.shared.sandboxing.cgroup import DEFAULT_CPU_WEIGHT
from bastion.shared.secretcuts import REFRESH_S
from bastion.shared.settings import BusSettings
from bastion.shared.statedir import default_state_dir

__all__ = ["SandboxSettings"]


def _default_state_dir() -> str:
    return str(default_state_dir())


class SandboxSettings(BusSettings, frozen=True, kw_only=True):
    """Where Bastion's state is (never shown to, nor accepted as, a workspace), the programs
    that build a sandbox, and what the operator lifts or caps.

    `git_writable` lets commands and the file tools write git's control files in the
    workspace (`gitguard`: `.git`'s config, hooks, commondir..., `.gitconfig`);
    `cgroups` False skips the per-command cgroup; `max_sandboxes_per_tenant` caps one
    tenant's concurrent sandboxes across every replica (`sharedslots`), a call over it
    waiting `tenant_wait_s` at most; `search_workers_per_tenant` does the same for its
    searches, per instance.
    """

    state_dir: str = msgspec.field(default_factory=_default_state_dir)
    bwrap: str = "bwrap"
    prlimit: str = "prlimit"
    setpriv: str = "setpriv"
    """`BASTION_SETPRIV`: the setpriv program a root service drops each sandbox to its
    unprivileged host user with (util-linux)."""
    sandbox_host_uid: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The host user a root service runs every bwrap sandbox as (`BASTION_SANDBOX_HOST_UID`),
    and the owner of what the file tools write; unset, each session's is its workspace's
    owner. Root (0) is refused, as a root-owned workspace is."""
    sandbox_host_gid: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """That user's group (`BASTION_SANDBOX_HOST_GID`); unset, the uid's number."""
    search_timeout_s: float = 20.0
    """How long `search_files` may take; an agent's regex can backtrack without end."""
    search_workers_per_tenant: Annotated[int, msgspec.Meta(ge=1)] = 2
    """`BASTION_SEARCH_WORKERS_PER_TENANT`: how many of one tenant's searches run at once,
    each in a worker process of its own; a further one waits (at most `search_timeout_s`)
    for one of that tenant's, never for another tenant's."""
    search_queue_per_tenant: Annotated[int, msgspec.Meta(ge=0)] = 8
    """`BASTION_SEARCH_QUEUE_PER_TENANT`: how many of one tenant's searches may wait for its
    workers; a further one is refused at once (`unavailable`, saying to retry later)."""
    git_writable: bool = False
    workspace_max_bytes: Annotated[int, msgspec.Meta(ge=0)] = 16 * 1024**3
    """`BASTION_WORKSPACE_MAX_BYTES`: the most disk a workspace may hold (16 GiB; 0: no
    bound), measured before each command and file write (see `usage`): over it, file
    tools' writes are refused and a command's files cannot grow past 64 KiB; under it, no
    file may grow past the room left. A soft bound: a hard one needs a filesystem quota."""
    cgroups: bool = True
    cpu_weight: Annotated[int, msgspec.Meta(ge=1, le=10000)] = DEFAULT_CPU_WEIGHT
    """`BASTION_CPU_WEIGHT`: each tenant's share of a contended CPU (cgroup v2's scale;
    `cpu.shares` of weight x 10.24 on v1). Every tenant has the same one, and a tenant's
    commands split it, so a tenant busy with many commands cannot crowd out another's."""
    max_sandboxes_per_tenant: Annotated[int, msgspec.Meta(ge=1)] = 8
    tenant_wait_s: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    sandbox_idle_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """`BASTION_SANDBOX_IDLE_S`: how long a session's warm bubblewrap sandbox (its
    namespaces, mounts and `/tmp`, kept between its commands) lives without a command
    before it is closed; the session's next command starts a fresh one and is told so."""
    sandbox_slots_bucket: str = subjects.SANDBOX_SLOTS_BUCKET
    """`BASTION_SANDBOX_SLOTS_BUCKET`: the KV bucket counting each tenant's running
    sandboxes across every sandbox replica."""
    sandbox_slot_lease_s: Annotated[float, msgspec.Meta(gt=0)] = 15.0
    """`BASTION_SANDBOX_SLOT_LEASE_S`: how long a running sandbox's slot is counted after
    its last renewal (every third of this): a dead replica's slots come back after it."""
    docker_owner: str = msgspec.field(default_factory=socket.gethostname)
    """Labels this instance's Docker containers; at start it removes every container of
    the same owner (an earlier run's leftovers). Instances sharing an engine each need
    their own."""
    docker_memory_bytes: int = ContainerLimits.memory_bytes
    docker_pids: int = ContainerLimits.pids
    docker_cpus: float = ContainerLimits.cpus
    docker_tmp_bytes: int = ContainerLimits.tmp_bytes
    sandbox_key_file: str = ""
    """The X25519 private key leases are sealed to (`BASTION_SANDBOX_KEY_FILE`); without
    one, a key is made at start and lives as long as the process."""
    egress_socket: str = ""
    """The egress proxy's Unix socket (`BASTION_EGRESS_SOCKET`), bound into a sandbox of the
    `declared` network for its bridge; without one, declared hosts are refused."""
    stream_interval_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 0.5
    """`BASTION_STREAM_INTERVAL_S`: a streamed `shell` call (a front-door client that asked
    for progress) has its command's output published at most once every so many seconds,
    what came meanwhile together."""
    stream_chunk_bytes: Annotated[int, msgspec.Meta(ge=256, le=256 * 1024)] = 8 * 1024
    """`BASTION_STREAM_CHUNK_BYTES`: the most output one streamed chunk carries; the rest
    of a burst is only counted (`… K bytes more`)."""
    stream_total_bytes: Annotated[int, msgspec.Meta(ge=1024, le=64 * 1024**2)] = 1024**2
    """`BASTION_STREAM_TOTAL_BYTES`: the most output streamed for one call; past it the
    stream says so and stops (the result keeps its own output limit)."""
    tasks_bucket: str = subjects.SANDBOX_TASKS_BUCKET
    """`BASTION_TASKS_BUCKET`: the KV bucket of background tasks (`bg_run`) and of each
    tenant's live ones, shared by every sandbox replica."""
    tasks_max_run_s: Annotated[float, msgspec.Meta(ge=1, le=86400)] = 3600.0
    """`BASTION_TASKS_MAX_RUN_S`: the longest a background task runs (its `timeout_ms` is
    capped by it, and is it when not given); then it is stopped and ends `failed`
    (`timeout`)."""
    tasks_max_output_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 2 * 1024 * 1024
    """`BASTION_TASKS_MAX_OUTPUT_BYTES`: how much of a background task's output its log
    keeps from the start; then a marker line, and its last 32 KiB once it ends."""
    tasks_max_per_session: Annotated[int, msgspec.Meta(ge=1)] = 4
    """`BASTION_TASKS_MAX_PER_SESSION`: live background tasks one session may have."""
    tasks_max_per_tenant: Annotated[int, msgspec.Meta(ge=1)] = 16
    """`BASTION_TASKS_MAX_PER_TENANT`: live background tasks one tenant may have across its
    sessions and every sandbox replica."""
    tasks_stop_wait_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 5.0
    """`BASTION_TASKS_STOP_WAIT_S`: how long `bg_stop` waits for the task to end before it
    answers the task as it is, saying it may still run; the stop goes on regardless
    (SIGKILL 3 s after SIGTERM, then again each second until every process is gone). Keep
    it under the orchestrator's `BASTION_REQUEST_TIMEOUT_S`."""
    redaction_refresh_s: Annotated[float, msgspec.Meta(ge=0)] = REFRESH_S
    """How long the vault's set of a tenant's values (cut from every reply) is used before
    the vault is asked again (`BASTION_REDACTION_REFRESH_S`)."""
