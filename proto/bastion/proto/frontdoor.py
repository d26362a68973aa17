"""The MCP front door: agents' bearer tokens, and the MCP sessions it serves.

An operator creates a token for an agent (`bastion token create`): the mcp service mints it,
answers it once (`TokenCreated.token`) and keeps only its SHA-256 (JetStream KV
`bastion_agent_tokens`, key: the hex digest) with the profile every session opened with it
gets (`TokenInfo`). Each MCP session of the session-based protocol era is kept in KV
`bastion_mcp_sessions` (key: its `Mcp-Session-Id`) so that any front door replica serves it,
and the sessions a token keeps open are counted in `bastion_mcp_session_slots` (key: the
token's hash), so every replica refuses one past the cap.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from bastion.proto._base import Identifier, Ingress, Message, PathText
from bastion.proto.policy import Autonomy
from bastion.proto.session import NetworkMode, SandboxBackend, SessionLimits

__all__ = [
    "CreateToken",
    "ListTokens",
    "McpSessionRecord",
    "McpSessionSlots",
    "RevokeToken",
    "TokenCreated",
    "TokenId",
    "TokenInfo",
    "TokenList",
    "TokenRevoked",
    "TokenWithdrawn",
]

TokenId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}$")]
"""A token's id: 16 lowercase hex digits, shown by `token list`, given to `token revoke`."""

ServerName = Annotated[str, msgspec.Meta(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9-]*$")]


class CreateToken(Ingress, frozen=True, kw_only=True, tag="frontdoor.token_create"):
    """Mint a token for `agent`; every MCP session opened with it gets this profile: the
    fields of `session.OpenSession` an operator gives `bastion agent run`, checked as a
    session's opening checks them before the token is minted."""

    agent: Identifier
    tenant: Identifier = "default"
    autonomy: Autonomy = "L2"
    workspace: PathText | None = None
    shell: bool = False
    sandbox: SandboxBackend = "bwrap"
    network: NetworkMode = "none"
    read_only_dirs: Annotated[tuple[PathText, ...], msgspec.Meta(max_length=32)] = ()
    skills_dir: PathText | None = None
    limits: SessionLimits = SessionLimits()
    skill_approvals: bool = True
    ask: bool = True
    web: bool = False
    mcp: Annotated[tuple[ServerName, ...], msgspec.Meta(max_length=32)] = ()


class TokenInfo(Message, frozen=True, kw_only=True, tag="frontdoor.token_info"):
    """A token as kept (under its hash) and listed: never the token itself."""

    token_id: TokenId
    agent: str
    tenant: str
    autonomy: Autonomy
    workspace: str | None = None
    shell: bool = False
    sandbox: str = "bwrap"
    network: str = "none"
    read_only_dirs: tuple[str, ...] = ()
    skills_dir: str | None = None
    limits: SessionLimits = SessionLimits()
    skill_approvals: bool = True
    ask: bool = True
    web: bool = False
    mcp: tuple[str, ...] = ()
    created_at: datetime


class TokenCreated(Message, frozen=True, kw_only=True, tag="frontdoor.token_created"):
    """The new token, shown this once, and what it was created with."""

    token: str
    info: TokenInfo


class ListTokens(Ingress, frozen=True, kw_only=True, tag="frontdoor.token_list_query"):
    """The tokens of one tenant, or of all when `tenant` is left out."""

    tenant: Identifier | None = None


class TokenList(Message, frozen=True, kw_only=True, tag="frontdoor.token_list"):
    """Tokens, oldest first."""

    tokens: tuple[TokenInfo, ...] = ()


class RevokeToken(Ingress, frozen=True, kw_only=True, tag="frontdoor.token_revoke"):
    """Forget a token: from then on, every request carrying it is refused."""

    token_id: TokenId


class TokenRevoked(Message, frozen=True, kw_only=True, tag="frontdoor.token_revoked"):
    """The token that was revoked, and whose it was."""

    token_id: str
    agent: str
    tenant: str


class TokenWithdrawn(Message, frozen=True, kw_only=True, tag="frontdoor.token_withdrawn"):
    """A token was revoked (told on `frontdoor.tokens.revoked`, to every front-door replica):
    each ends what it holds of it, its calls in flight and its MCP sessions' transports.
    `token_hash` is the token's key in `bastion_agent_tokens` (its SHA-256, never the token)."""

    token_hash: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


class McpSessionRecord(Message, frozen=True, kw_only=True, tag="frontdoor.mcp_session"):
    """One session-based MCP session, as every front door replica finds it in KV.

    `client_params_json` is what the front door keeps of the client's `initialize` params
    (JSON, bounded: `bastion.mcp.frontdoor.opening`), so a replica that did not see the
    handshake can serve the session as initialized. `bastion_session_id` is
    empty until the session's first request that needs it; `owner` names the replica that
    last served it, the only one whose idle timer may end it.
    """

    mcp_session_id: str
    token_hash: str
    protocol_version: str
    client_params_json: str
    created_at: datetime
    bastion_session_id: str = ""
    owner: str = ""


class McpSessionSlots(Message, frozen=True, kw_only=True, tag="frontdoor.mcp_session_slots"):
    """The session-based MCP sessions one token keeps open or is opening, counted by every
    front door replica against `BASTION_MCP_MAX_SESSIONS_PER_TOKEN`.

    `held` maps each session's `Mcp-Session-Id` to when its slot lapses: a replica serving
    the session renews it well before then, so the slots of a replica that died lapse on
    their own, and are not counted once past.
    """

    held: dict[str, datetime] = msgspec.field(default_factory=dict)
