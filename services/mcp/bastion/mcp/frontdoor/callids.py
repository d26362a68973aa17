"""The Bastion call id of an MCP `tools/call`: the same for a retry of the same request.

In a session-based MCP session a request is identified by its session and its JSON-RPC id;
the call id is a digest of those with the tool's name and its arguments, so a `tools/call`
POSTed again (its first stream cut, or sent twice) reaches the orchestrator with the call id
of its first sending and is answered from that one run (`bastion.orchestrator.callrecords`),
while a request id reused for another call is another call. A stateless request has nothing
that names a retry: its call id is random.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from typing import Any

__all__ = ["call_id_of"]


def call_id_of(
    mcp_session_id: str | None,
    request_id: str | int | None,
    tool: str,
    arguments: Mapping[str, Any] | None,
) -> str:
    """16 lowercase hex digits: the first of the SHA-256 of the request's identity (session,
    JSON-RPC id, tool, arguments as canonical JSON) in an MCP session, random otherwise."""
    if mcp_session_id is None or request_id is None:
        return secrets.token_hex(8)
    identity = json.dumps(
        [mcp_session_id, request_id, tool, dict(arguments or {})],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(identity.encode()).hexdigest()[:16]
