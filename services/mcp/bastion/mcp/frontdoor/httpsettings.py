"""The front door's HTTP address, tokens and origins, from the mcp service's settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bastion.mcp.settings import McpSettings
from bastion.shared.errors import BastionError
from bastion.shared.httptokens import read_tokens, tokens_path
from bastion.shared.netclass import is_loopback_host

__all__ = ["FrontDoor", "UnsafeListen", "front_door_of"]


class UnsafeListen(BastionError):
    """The front door's listen address is not valid, or is not loopback with no tokens."""


@dataclass(frozen=True)
class FrontDoor:
    """What the HTTP server needs: where to listen, the tokens by label, allowed origins, the
    largest bodies read, and the MCP endpoint's waits."""

    host: str
    port: int
    tokens: dict[str, str]
    origins: frozenset[str]
    answer_timeout_s: float
    max_body_bytes: int
    mcp_max_request_bytes: int
    mcp_body_read_s: float = 30.0
    approval_wait_s: float = 30.0
    call_timeout_s: float = 3600.0
    session_idle_s: float = 1800.0
    max_sessions_per_token: int = 32
    session_slot_s: float = 60.0
    progress_every_s: float = 2.0
    task_end_gather_s: float = 2.0
    task_end_every_s: float = 10.0
    revoked_sweep_s: float = 30.0


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
        mcp_max_request_bytes=settings.mcp_max_request_bytes,
        mcp_body_read_s=settings.mcp_body_read_s,
        approval_wait_s=settings.mcp_approval_wait_s,
        call_timeout_s=settings.mcp_call_timeout_s,
        session_idle_s=settings.mcp_session_idle_s,
        max_sessions_per_token=settings.mcp_max_sessions_per_token,
        session_slot_s=settings.mcp_session_slot_s,
        progress_every_s=settings.mcp_progress_every_s,
        task_end_gather_s=settings.mcp_task_end_gather_s,
        task_end_every_s=settings.mcp_task_end_every_s,
        revoked_sweep_s=settings.mcp_revoked_sweep_s,
    )
