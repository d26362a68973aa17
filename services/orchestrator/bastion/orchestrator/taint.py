"""Taint: a session that read content from outside asks again until the taint expires.

A result from outside is one of a tool whose effect is `external` (today `shell` with
`--network host`; later fetched pages and open-world MCP tools). While a session is
tainted the policy suspends every pre-approval, so a page cannot steer the agent into
calls that no one sees.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from bastion.proto.policy import Effect
from bastion.proto.session import SessionInfo

__all__ = ["is_tainted", "tainted_by"]


def is_tainted(session: SessionInfo, now: datetime) -> bool:
    """Whether the session's taint has not expired at `now`."""
    return session.tainted_until is not None and now < session.tainted_until


def tainted_by(session: SessionInfo, effect: Effect, now: datetime, taint_s: float) -> SessionInfo:
    """`session` after a call of `effect` brought back its result: tainted until
    `now + taint_s` if the result came from outside (never shortening a longer taint)."""
    if effect != "external" or taint_s <= 0:
        return session
    until = now + timedelta(seconds=taint_s)
    if session.tainted_until is not None and session.tainted_until >= until:
        return session
    return msgspec.structs.replace(session, tainted_until=until)
