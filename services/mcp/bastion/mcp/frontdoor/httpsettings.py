"""The mcp service's settings, and the front door's HTTP address, tokens and origins from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from bastion.shared.errors import BastionError
from bastion.shared.httptokens import read_tokens, tokens_path
from bastion.shared.netclass import is_loopback_host
from bastion.shared.settings import BusSettings
from bastion.shared.statedir import default_state_dir

__all__ = ["FrontDoor", "McpSettings", "UnsafeListen", "front_door_of"]


def _default_state_dir() -> str:
    return str(default_state_dir())


class McpSettings(BusSettings, frozen=True, kw_only=True):
    """The bus; the front door: `http_listen` (`host:port`), `http_tokens_file` (default
    `<state_dir>/http-tokens`), `http_origins` (comma-separated; none by default, so a request
    carrying an `Origin` is refused), how long an approval's answer may take, and the MCP
    endpoint's waits; and the upstream servers' connections (`mcp_key_file`, `mcp_idle_s`,
    `mcp_elicit_timeout_s`)."""

    state_dir: str = msgspec.field(default_factory=_default_state_dir)
    http_listen: str = "127.0.0.1:8787"
    http_tokens_file: str = ""
    http_origins: str = ""
    http_answer_timeout_s: float = 900.0
    http_max_body_bytes: int = 64 * 1024
    mcp_key_file: str = ""
    """The X25519 key the vault seals upstream servers' values to (`BASTION_MCP_KEY_FILE`);
    empty: a new one for this process's life (the vault must list its public half)."""
    mcp_idle_s: float = 600.0
    """How long a session's upstream connection stays open with no call."""
    mcp_elicit_timeout_s: float = 600.0
    """How long an upstream server's question waits for an answer before it is cancelled."""
    mcp_approval_wait_s: float = 30.0
    """How long `/mcp` waits for a person to answer a parked call elsewhere (a client that
    cannot be asked through elicitation) before it says how to answer."""
    mcp_call_timeout_s: float = 3600.0
    """The longest a `tools/call` through `/mcp` may take."""
    mcp_session_idle_s: float = 1800.0
    """An MCP session with no request for this long ends, and its Bastion session closes."""


class UnsafeListen(BastionError):
    """The front door's listen address is not valid, or is not loopback with no tokens."""


@dataclass(frozen=True)
class FrontDoor:
    """What the HTTP server needs: where to listen, the tokens by label, allowed origins, and
    the MCP endpoint's waits."""

    host: str
    port: int
    tokens: dict[str, str]
    origins: frozenset[str]
    answer_timeout_s: float
    max_body_bytes: int
    approval_wait_s: float = 30.0
    call_timeout_s: float = 3600.0
    session_idle_s: float = 1800.0


def _split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UnsafeListen(
            f"BASTION_HTTP_LISTEN={listen!r} is not `host:port` (e.g. 127.0.0.1:8787, [::1]:8787)"
        )
    return host, int(port)


def front_door_of(settings: McpSettings) -> FrontDoor:
    """The front door `settings` describe.

    Raises:
        UnsafeListen: the address is malformed, or not loopback while no token is configured.
        UnsafeTokensFile: the tokens file is readable by others or has a bad line.
    """
    host, port = _split_listen(settings.http_listen)
    path = Path(settings.http_tokens_file or tokens_path(Path(settings.state_dir)))
    tokens = read_tokens(path.expanduser())
    if not tokens and not is_loopback_host(host):
        raise UnsafeListen(
            f"the front door would listen on {host}, which is not a loopback address, with no "
            f"token configured, so anyone who reaches it could answer approvals: put a token "
            f"in {path} (`label:token`, mode 600) or listen on 127.0.0.1"
        )
    origins = frozenset(
        o.strip().rstrip("/") for o in settings.http_origins.split(",") if o.strip()
    )
    return FrontDoor(
        host=host,
        port=port,
        tokens=tokens,
        origins=origins,
        answer_timeout_s=settings.http_answer_timeout_s,
        max_body_bytes=settings.http_max_body_bytes,
        approval_wait_s=settings.mcp_approval_wait_s,
        call_timeout_s=settings.mcp_call_timeout_s,
        session_idle_s=settings.mcp_session_idle_s,
    )
