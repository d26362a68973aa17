"""Taint: a session that read content from outside asks again until the taint expires.

A result from outside is one of a tool whose effect is `external` (`shell` with
`--network host`, fetched pages and searches) or that says it brings the outside in (an
open-world upstream MCP tool, even a read-only one; a server's resources). While a session is
tainted the policy suspends every pre-approval, so a page cannot steer the agent into
calls that no one sees.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from bastion.proto.session import SessionInfo, ToolSpec

__all__ = ["from_outside", "is_tainted", "tainted_by"]


def is_tainted(session: SessionInfo, now: datetime) -> bool:
    """Whether the session's taint has not expired at `now`."""
    return session.tainted_until is not None and now < session.tainted_until


def from_outside(tool: ToolSpec) -> bool:
    """Whether what a call of `tool` returns comes from outside and taints the session."""
    return tool.effect == "external" or tool.taints


def tainted_by(session: SessionInfo, now: datetime, taint_s: float) -> SessionInfo:
    """`session` after a result from outside came back: tainted until `now + taint_s`
    (never shortening a longer taint)."""
    if taint_s <= 0:
        return session
    until = now + timedelta(seconds=taint_s)
    if session.tainted_until is not None and session.tainted_until >= until:
        return session
    return msgspec.structs.replace(session, tainted_until=until)
