"""Opening, getting and closing a session, and what a session is."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from bastion.proto._base import Identifier, Ingress, Message, PathText, SessionId, name_meta
from bastion.proto.policy import Autonomy, Effect, PreApproval
from bastion.proto.sandbox import Limits

__all__ = [
    "NetworkMode",
    "OpenSession",
    "OpeningChecked",
    "SandboxBackend",
    "SessionInfo",
    "SessionLimits",
    "SessionRef",
    "ToolSpec",
]

SandboxBackend = Annotated[
    str,
    msgspec.Meta(
        max_length=512,
        pattern=r"^(bwrap|docker:.+)$",
        description="`bwrap`, or `docker:<image>@sha256:<64 hex digits>`.",
    ),
]

NetworkMode = Annotated[
    str, name_meta(128, "`none`, `declared`, `host`, or the name of a Docker network.")
]


class SessionLimits(Ingress, frozen=True, kw_only=True):
    """What each command of a session may use; a limit left out keeps its default (`Limits`)."""

    wall_s: Annotated[float, msgspec.Meta(gt=0, le=86400)] | None = None
    cpu_s: Annotated[int, msgspec.Meta(gt=0, le=86400)] | None = None
    address_space_bytes: Annotated[int, msgspec.Meta(gt=0)] | None = None
    file_size_bytes: Annotated[int, msgspec.Meta(gt=0)] | None = None
    output_bytes: Annotated[int, msgspec.Meta(ge=1024, le=16 * 1024 * 1024)] | None = None
    processes: Annotated[int, msgspec.Meta(ge=8, le=65536)] | None = None
    memory_bytes: Annotated[int, msgspec.Meta(ge=16 * 1024 * 1024)] | None = None


class OpenSession(Ingress, frozen=True, kw_only=True, tag="session.open"):
    """Ask for a new session: who runs it, how much it may do, and where its tools run."""

    agent: Identifier
    tenant: Identifier = "default"
    autonomy: Autonomy = "L2"
    workspace: PathText | None = None
    shell: bool = False
    sandbox: SandboxBackend = "bwrap"
    network: NetworkMode = "none"
    read_only_dirs: Annotated[tuple[PathText, ...], msgspec.Meta(max_length=32)] = ()
    """Host directories shown read-only in the sandbox at their own paths (`--sandbox-read`)."""
    skills_dir: PathText | None = None
    """The skills this session may run; never overlapping the workspace."""
    limits: SessionLimits = SessionLimits()
    """Limits of every command the session runs (`--sandbox-timeout`, `--sandbox-limit`)."""
    skill_approvals: bool = True
    """False (`--no-skill-approvals`): skills' `allowed-tools` pre-approve nothing."""
    ask: bool = True
    """False (`--no-ask`): nobody answers approvals, so a call that would ask is refused."""
    web: bool = False
    """True (`--web`): the session gets `fetch_url`, run by the egress service."""
    mcp: Annotated[
        tuple[
            Annotated[str, msgspec.Meta(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9-]*$")],
            ...,
        ],
        msgspec.Meta(max_length=32),
    ] = ()
    """Upstream MCP servers (`--mcp NAME`) whose reviewed tools the session gets."""
    token_id: Annotated[str, msgspec.Meta(pattern=r"^([0-9a-f]{16})?$")] = ""
    """The front-door token the session is opened for: its open sessions are capped
    (`BASTION_MAX_SESSIONS_PER_TOKEN`); empty for one opened on the bus."""
    elicits: bool = False
    """A client answers upstream servers' questions for it: a front-door client that
    declared form elicitation. False for a session opened on the bus (`agent run`)."""


class OpeningChecked(Message, frozen=True, kw_only=True, tag="session.opening_checked"):
    """A session could be opened as an `OpenSession` asks (`session.check`): nothing was
    opened; a profile that could not is refused with the opening's error instead."""

    checked: bool = True


class SessionRef(Ingress, frozen=True, kw_only=True, tag="session.ref"):
    """Name a session, to get it or to close it."""

    session_id: SessionId


class ToolSpec(Message, frozen=True, kw_only=True, tag="tool.spec"):
    """One tool of a session's catalogue and the most a call of it can do."""

    name: str
    effect: Effect
    description: str
    input_schema_json: str = ""
    """The JSON Schema of the tool's input, as JSON (what an MCP client is shown)."""
    server: str = ""
    """The upstream MCP server of the tool; empty for Bastion's own tools."""
    upstream: str = ""
    """The tool's name on its server; empty for the server's resources tools."""
    upstream_kind: Literal["", "tool", "resources", "read_resource"] = ""
    """For an upstream tool: `tool`, `resources` or `read_resource` (`mcp.UpstreamKind`)."""
    digest: str = ""
    """The pin of an upstream tool, checked again when it is called."""
    journaled: bool = False
    """An upstream tool neither read-only nor idempotent: its calls go in the journal."""
    taints: bool = False
    """What it returns comes from outside (an open-world upstream tool, a resource)."""
    call_timeout_s: float = 0.0
    """How long a call may take before it counts as unanswered; 0: the service's default."""


class SessionInfo(Message, frozen=True, kw_only=True, tag="session.info"):
    """A session as the orchestrator keeps it."""

    session_id: SessionId
    tenant: str
    agent: str
    autonomy: Autonomy
    workspace: str | None
    shell: bool
    sandbox: str
    network: str
    state: Literal["open", "closed"]
    opened_at: datetime
    closed_at: datetime | None = None
    calls: int = 0
    tools: tuple[ToolSpec, ...] = ()
    read_only_dirs: tuple[str, ...] = ()
    skills_dir: str | None = None
    limits: Limits = Limits()
    """The limits every command of the session runs with (the defaults, or what it asked)."""
    tainted_until: datetime | None = None
    """Until when the session counts as tainted (it read content from outside); None: never."""
    pre_approvals: tuple[PreApproval, ...] = ()
    """Rules in force: skills' `allowed-tools` once read, and persons' "always" answers."""
    skill_approvals: bool = True
    """False (`--no-skill-approvals`): skills' rules are ignored by the policy."""
    ask: bool = True
    """False (`--no-ask`): a call that would ask is refused at once."""
    waiting_for: str = ""
    """The request id of the parked call the session waits on; empty when none."""
    notices: tuple[str, ...] = ()
    """What the session was not given and why (an upstream tool changed since its review)."""
    mcp: tuple[str, ...] = ()
    """The upstream MCP servers the session asked for."""
    token_id: str = ""
    """The front-door token it was opened for (counted against that token's cap); empty
    for a session opened on the bus (the CLI)."""
    elicits: bool = False
    """A client answers upstream servers' questions for it (`OpenSession.elicits`)."""
