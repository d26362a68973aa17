"""Upstream MCP servers: how one is started or reached, its review and pins, and its calls.

The mcp service keeps each tenant's servers (JetStream KV `bastion_mcp_servers`, key
`<tenant>.<name>`). A server is added and reviewed by an operator (`bastion mcp add|review`);
the review pins a digest of each tool's definition (`ToolPin`). At a session's start the
orchestrator asks which of a server's tools may be offered (`OfferTools`): only those whose
live definition still matches its pin, each named `<server>_<tool>`; the others are named in
`ToolOffer.notices`, with how to review them. A call (`McpCall`) is checked against the pin
again, on the live connection, just before it is made.

What an upstream sends is untrusted and bounded: descriptions and schemas are cut or refused
by the mcp service before they reach any message here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from bastion.proto._base import Identifier, Ingress, Message, PathText, SessionId, Text
from bastion.proto.policy import Effect
from bastion.proto.session import NetworkMode

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_SCHEMA_JSON",
    "AddServer",
    "BrowseServer",
    "BrowseText",
    "EffectOverride",
    "ElicitAnswer",
    "ElicitQuestion",
    "ListServers",
    "McpCall",
    "McpCallResult",
    "McpPrefetch",
    "McpReview",
    "McpServerRecord",
    "McpServerSpec",
    "OfferTools",
    "OfferedTool",
    "RemoveServer",
    "ReviewServer",
    "ReviewedTool",
    "SampleAnswer",
    "SampleQuestion",
    "SamplingAllowance",
    "ServerList",
    "ServerRemoved",
    "ServerSummary",
    "ToolOffer",
    "ToolPin",
    "UpstreamKind",
]

MAX_DESCRIPTION = 16 * 1024
"""The longest tool description kept (characters); a longer one is cut and flagged."""
MAX_SCHEMA_JSON = 256 * 1024
"""The largest input or output schema kept (bytes of JSON); a larger tool is not offered."""

ServerName = Annotated[str, msgspec.Meta(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9-]*$")]
"""An upstream server's name within its tenant: its tools are `<name>_<tool>`."""

UpstreamToolName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)]
Argument = Annotated[str, msgspec.Meta(max_length=4096)]
ServerSandbox = Annotated[str, msgspec.Meta(max_length=512, pattern=r"^(bwrap|none|docker:.+)$")]
"""`bwrap`, `docker:<image>@sha256:<digest>`, or `none` (unsandboxed, the operator's choice)."""
HeaderTemplate = Annotated[
    str, msgspec.Meta(min_length=3, max_length=8192, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+: ")
]
"""`Name: value`; `${VAR}` in the value is filled from the tenant's vault secret VAR."""


class EffectOverride(Ingress, frozen=True, kw_only=True, tag="mcp.effect_override"):
    """`--effect TOOL=EFFECT`: what a call of the tool is taken to do, whatever it says."""

    tool: UpstreamToolName
    effect: Effect


class SamplingAllowance(Ingress, frozen=True, kw_only=True, tag="mcp.sampling"):
    """Sampling allowed for a server: at most `max_tokens` a completion, `per_session` of them."""

    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1000
    per_session: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5


class McpServerSpec(Ingress, frozen=True, kw_only=True, tag="mcp.server_spec"):
    """How to start (stdio) or reach (http) an upstream server, as the operator gave it.

    stdio: `command` is the program and its arguments; `directory` is where it works (at
    /workspace in the sandbox); it gets the variables `env` names (from the tenant's vault,
    else the mcp service's own environment) and PATH, HOME, LANG, TMPDIR, nothing else; its
    standard error is discarded. `sandbox` is `bwrap` (the default), `docker:<image>@sha256:…`
    or `none` (the operator's explicit choice to run it unsandboxed); `sandbox_network` is
    `none` unless given.

    http: `url` (Streamable HTTP, or the legacy HTTP+SSE transport, found as the
    specification says), `headers` added to every request; its traffic leaves through the
    egress service.
    """

    transport: Literal["stdio", "http"]
    command: Annotated[tuple[Argument, ...], msgspec.Meta(max_length=256)] = ()
    directory: PathText | None = None
    env: Annotated[tuple[EnvName, ...], msgspec.Meta(max_length=64)] = ()
    sandbox: ServerSandbox = "bwrap"
    sandbox_network: NetworkMode = "none"
    url: Annotated[str, msgspec.Meta(max_length=8192, pattern=r"^https?://")] | None = None
    headers: Annotated[tuple[HeaderTemplate, ...], msgspec.Meta(max_length=32)] = ()
    public_key_pem: Annotated[str, msgspec.Meta(max_length=8192)] | None = None
    """A PEM ECDSA P-256 public key: every tool must then carry a valid signature."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0
    """How long a call may take before it counts as unanswered (uncertain)."""
    effects: Annotated[tuple[EffectOverride, ...], msgspec.Meta(max_length=256)] = ()
    sampling: SamplingAllowance | None = None
    """None: the server's sampling requests are refused."""
    read_only_dirs: Annotated[tuple[PathText, ...], msgspec.Meta(max_length=32)] = ()
    """Host directories shown read-only in its sandbox at their own paths (`--sandbox-read`),
    e.g. the virtual environment its program is installed in."""


class ToolPin(Message, frozen=True, kw_only=True, tag="mcp.tool_pin"):
    """A reviewed tool: the digest of its definition and what a call of it is taken to do."""

    name: str
    digest: str
    """SHA-256 (hex) of the canonical JSON of name, title, description, input and output
    schema and annotations."""
    description: str
    effect: Effect
    idempotent: bool = False
    open_world: bool = True
    """Its results come from outside and taint the session (the protocol's default)."""


class McpServerRecord(Message, frozen=True, kw_only=True, tag="mcp.server_record"):
    """A tenant's server as kept in KV: how to run it, what it was at review, and the pins."""

    tenant: str
    name: str
    spec: McpServerSpec
    added_at: datetime
    reviewed_at: datetime
    server_name: str = ""
    server_version: str = ""
    protocol: str = ""
    """The protocol version the server spoke at its review: tried first next time."""
    key_fingerprint: str = ""
    """SHA-256 (hex) of the pinned public key's DER SubjectPublicKeyInfo; empty: unsigned."""
    pins: tuple[ToolPin, ...] = ()


ReviewStatus = Literal["new", "changed", "unchanged", "removed", "refused"]


class ReviewedTool(Message, frozen=True, kw_only=True, tag="mcp.reviewed_tool"):
    """One tool as a review shows it."""

    name: str
    effect: Effect
    description: str
    status: ReviewStatus
    repeats_run_again: bool = False
    """A write the server says is idempotent: an identical call runs again, where another
    write's repeat is answered from the journal."""
    flags: tuple[str, ...] = ()
    """Sentences about what is suspicious in it (invisible or bidirectional Unicode, a cut
    description, a bad signature); a refused tool says why here."""


class McpReview(Message, frozen=True, kw_only=True, tag="mcp.review"):
    """What `add` or `review` found: the server, its tools, and whether they were pinned."""

    server: str
    server_name: str
    server_version: str
    protocol: str
    runs: str
    """How it runs, in a sentence (`python3 notes.py, in bwrap with no network`)."""
    tools: tuple[ReviewedTool, ...]
    pinned: bool
    """True when the tools as listed are now the pins (add, or review with accept)."""


class AddServer(Ingress, frozen=True, kw_only=True, tag="mcp.add"):
    """Add a server for a tenant: start or reach it, review its tools and pin them."""

    tenant: Identifier = "default"
    name: ServerName
    spec: McpServerSpec


class ReviewServer(Ingress, frozen=True, kw_only=True, tag="mcp.review_request"):
    """Show what changed since a server's review; `accept` pins its tools as they are now."""

    tenant: Identifier = "default"
    name: ServerName
    accept: bool = False


class ListServers(Ingress, frozen=True, kw_only=True, tag="mcp.list"):
    tenant: Identifier = "default"


class ServerSummary(Message, frozen=True, kw_only=True, tag="mcp.server_summary"):
    name: str
    runs: str
    pins: tuple[ToolPin, ...]


class ServerList(Message, frozen=True, kw_only=True, tag="mcp.server_list"):
    tenant: str
    servers: tuple[ServerSummary, ...]


class RemoveServer(Ingress, frozen=True, kw_only=True, tag="mcp.remove"):
    tenant: Identifier = "default"
    name: ServerName


class ServerRemoved(Message, frozen=True, kw_only=True, tag="mcp.removed"):
    name: str


UpstreamKind = Literal["tool", "resources", "read_resource"]
"""A session's upstream tools: a server's own tool, or `<server>_resources` (list what it
offers) and `<server>_read_resource` (read one by its URI)."""


class OfferedTool(Message, frozen=True, kw_only=True, tag="mcp.offered_tool"):
    """An upstream tool a session may be given, as `<server>_<tool>`."""

    name: str
    server: str
    upstream: str
    """The tool's own name on its server; empty for the resources tools."""
    upstream_kind: UpstreamKind = "tool"
    description: str
    effect: Effect
    input_schema_json: str
    """The tool's input schema, as JSON (bounded by MAX_SCHEMA_JSON)."""
    digest: str = ""
    journaled: bool = False
    taints: bool = False
    call_timeout_s: float = 60.0
    """The server's `timeout_s`: a call unanswered by then is uncertain."""


class OfferTools(Message, frozen=True, kw_only=True, tag="mcp.offer"):
    """Which tools of these servers a session may be offered now (asked at session start)."""

    tenant: str
    session_id: SessionId
    servers: tuple[str, ...]
    can_ask: bool = False
    """A client answers the servers' questions for the session (`SessionInfo.elicits`):
    only then is elicitation declared to them; False: they are not offered it."""
    skills_dir: str = ""
    """The session's skills directory: a server whose directory overlaps it is not offered."""


class ToolOffer(Message, frozen=True, kw_only=True, tag="mcp.tool_offer"):
    tools: tuple[OfferedTool, ...]
    notices: tuple[str, ...] = ()
    """What is withheld and why, e.g. `MCP server notes: export_notes is new and was not
    reviewed, so it is not offered (`bastion mcp review notes`)`."""


class McpCall(Message, frozen=True, kw_only=True, tag="mcp.call"):
    """Call an upstream tool for a session, its pin checked on the live connection first."""

    tenant: str
    session_id: SessionId
    call_id: str
    server: str
    upstream_kind: UpstreamKind = "tool"
    tool: str = ""
    digest: str = ""
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    can_ask: bool = False
    """A client answers the server's questions for this session (`SessionInfo.elicits`:
    elicitation is relayed on `mcp.elicit.<session>`); False: they are declined."""


class McpPrefetch(Message, frozen=True, kw_only=True, tag="mcp.prefetch"):
    """The call `call_id` of a tool of `server` is on its way (published once it is known,
    before its policy decision, and when it is approved): the session's connection starts
    the tools listing that call's pin check will use, taken after the call was made
    (`docs/upstream-mcp.md`)."""

    tenant: str
    session_id: SessionId
    call_id: str
    server: str


class McpCallResult(Message, frozen=True, kw_only=True, tag="mcp.call_result"):
    """The upstream's answer as text the model is shown; `is_error` when the tool said so."""

    text: Text
    is_error: bool = False


class BrowseServer(Ingress, frozen=True, kw_only=True, tag="mcp.browse"):
    """An operator looks at a server's resources (or reads one) or prompts."""

    tenant: Identifier = "default"
    name: ServerName
    what: Literal["resources", "read", "prompts"]
    uri: Annotated[str, msgspec.Meta(max_length=8192)] = ""


class BrowseText(Message, frozen=True, kw_only=True, tag="mcp.browse_text"):
    text: Text


class ElicitQuestion(Message, frozen=True, kw_only=True, tag="mcp.elicit"):
    """An upstream server asks, during a call, for a person's input (`mcp.elicit.<session>`).

    Whoever answers for the session (the front door, for an MCP client that takes
    elicitation) subscribes there while the session's call runs; with no one there the
    mcp service declines. A form asking for a password, key, token or card number is
    declined before it is ever relayed.
    """

    session_id: SessionId
    server: str
    message: Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION)]
    schema_json: Annotated[str, msgspec.Meta(max_length=MAX_SCHEMA_JSON)] = ""
    """The form's JSON Schema (flat object of primitive fields); empty for a URL request."""
    url: Annotated[str, msgspec.Meta(max_length=8192)] = ""


class ElicitAnswer(Message, frozen=True, kw_only=True, tag="mcp.elicit_answer"):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] = msgspec.field(default_factory=dict)


class SampleQuestion(Message, frozen=True, kw_only=True, tag="mcp.sample"):
    """An upstream server allowed to sample asks for a completion (`mcp.sample.<session>`).

    Relayed, like a question, to whoever answers for the session (the front door, for an
    MCP client that takes sampling); the request is the protocol's `sampling/createMessage`
    params as JSON, its `maxTokens` already within the server's allowance and without any
    of the session's context.
    """

    session_id: SessionId
    server: str
    request_json: Annotated[str, msgspec.Meta(max_length=MAX_SCHEMA_JSON)]


class SampleAnswer(Message, frozen=True, kw_only=True, tag="mcp.sample_answer"):
    """The completion (`CreateMessageResult` as JSON), or why there is none."""

    result_json: Annotated[str, msgspec.Meta(max_length=MAX_SCHEMA_JSON)] = ""
    refused: Annotated[str, msgspec.Meta(max_length=1024)] = ""
