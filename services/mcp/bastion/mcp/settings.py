"""The mcp service's settings: the front door's address, tokens, origins and waits, and the
upstream servers' connections."""

from __future__ import annotations

from typing import Annotated

import msgspec

from bastion.shared.settings import BusSettings
from bastion.shared.statedir import default_state_dir

__all__ = ["McpSettings"]


def _default_state_dir() -> str:
    return str(default_state_dir())


class McpSettings(BusSettings, frozen=True, kw_only=True):
    """The bus; the front door: `http_listen` (`host:port`), `http_tokens_file` (default
    `<state_dir>/http-tokens`), `http_origins` (comma-separated; none by default, so a request
    carrying an `Origin` is refused), how long an approval's answer may take, and the MCP
    endpoint's waits; and the upstream servers' connections (`mcp_key_file`, `mcp_idle_s`,
    `mcp_elicit_timeout_s`, `mcp_pin_recheck_s`)."""

    state_dir: str = msgspec.field(default_factory=_default_state_dir)
    http_listen: str = "127.0.0.1:8787"
    http_tokens_file: str = ""
    http_origins: str = ""
    http_answer_timeout_s: float = 900.0
    http_max_body_bytes: int = 64 * 1024
    mcp_max_request_bytes: Annotated[int, msgspec.Meta(gt=0)] = 4 * 1024 * 1024
    """`BASTION_MCP_MAX_REQUEST_BYTES`: the largest request body `/mcp` reads (4 MiB, the MCP
    SDK's own); a larger one is answered 413 with a JSON-RPC error saying how to send less at
    once. Kept low because the SDK parses a request into Python objects that can take tens of
    times its size (a JSON array of empty objects, about 30 times), held while its call runs:
    raise it only with the memory for it. The bus carries 8 MiB under `bastion up`; a request
    between the two limits, raised, gets the bus's own `invalid_input`."""
    mcp_body_read_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 30.0
    """`BASTION_MCP_BODY_READ_S`: how long `/mcp` waits for a request's whole body; one that
    has not arrived by then is answered 408 (a client that stalls holds no memory for ever)."""
    mcp_key_file: str = ""
    """The X25519 key the vault seals upstream servers' values to (`BASTION_MCP_KEY_FILE`);
    empty: a new one for this process's life (the vault must list its public half)."""
    mcp_idle_s: float = 600.0
    """How long a session's upstream connection stays open with no call."""
    mcp_elicit_timeout_s: float = 600.0
    """How long an upstream server's question waits for an answer before it is cancelled."""
    mcp_pin_recheck_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """How long (seconds) a connection's last tools listing may stand for the call-time pin
    check, when the server has not said its tools changed: an operator's choice to trust a
    server that far. 0, the default: every call is checked against a listing asked for after
    it was made."""
    mcp_approval_wait_s: float = 30.0
    """How long `/mcp` waits for a person to answer a parked call elsewhere (a client that
    cannot be asked through elicitation) before it says how to answer."""
    mcp_call_timeout_s: float = 3600.0
    """The longest a `tools/call` through `/mcp` may take."""
    mcp_session_idle_s: float = 1800.0
    """An MCP session with no request for this long ends, and its Bastion session closes."""
    mcp_max_sessions_per_token: Annotated[int, msgspec.Meta(gt=0)] = 32
    """`BASTION_MCP_MAX_SESSIONS_PER_TOKEN`: the most session-based MCP sessions one agent
    token may keep open (or be opening) at once, counted across every mcp replica; one more
    `initialize` is answered 429. A session gives its slot back when its client DELETEs it
    or it ends idle."""
    mcp_session_slot_s: Annotated[float, msgspec.Meta(ge=3, le=3600)] = 60.0
    """`BASTION_MCP_SESSION_SLOT_S`: how long a session's slot in that count lasts unless
    the replica serving the session renews it (every third of this): the slots of a replica
    that died lapse after at most this long."""
    mcp_progress_every_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 2.0
    """`BASTION_MCP_PROGRESS_EVERY_S`: how often a `tools/call` through `/mcp` whose client
    asked for progress is told that it still runs (its output, for `shell`, is told as it
    comes: `BASTION_STREAM_INTERVAL_S` of the sandbox service)."""
    mcp_task_end_gather_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 2.0
    """`BASTION_MCP_TASK_END_GATHER_S`: background tasks of a session that end within this
    long of the first share one `notifications/message` to its MCP client."""
    mcp_task_end_every_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 10.0
    """`BASTION_MCP_TASK_END_EVERY_S`: an MCP client is told of its tasks' ends at most once
    this often; ends in between wait for the next message (none is dropped)."""
    mcp_revoked_sweep_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 30.0
    """`BASTION_MCP_REVOKED_SWEEP_S`: how often each front door looks for what a revoked
    token still has that its revoke did not end (its broadcast missed, the revoking replica
    gone): calls cancelled, MCP sessions ended, Bastion sessions closed. Each sweep reads
    every MCP session record, and the token of each."""
