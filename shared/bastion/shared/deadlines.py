"""How long each hop of a call waits, derived from the call's own limit.

The innermost limit is the work's own: a command's wall clock, an upstream tool's
timeout, the fetch of a page. The service doing the work answers within it (a command
past its wall clock is killed and reported as timed out). The orchestrator waits for that
service `work_s + its request timeout`, and whoever sends `session.<id>.call` waits
`call_wait_s`: the work's limit and `CALLER_MARGIN_S` more, which covers the hops and
what the orchestrator asks on the way (policy, hooks, audit). So no caller gives up
before the one it asked has answered or said why not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bastion.proto.session import SessionInfo, ToolSpec

__all__ = [
    "CALLER_MARGIN_S",
    "FETCH_S",
    "SEARCH_S",
    "UPSTREAM_MARGIN_S",
    "call_wait_s",
    "shell_wall_s",
    "work_s",
]

FETCH_S = 60.0
"""The longest the orchestrator waits for the egress service to fetch a page."""
SEARCH_S = 30.0
"""The longest it waits for a web search."""
UPSTREAM_MARGIN_S = 10.0
"""How much longer than an upstream tool's own limit the orchestrator waits for the mcp
service, which answers `uncertain` itself when that limit runs out."""
CALLER_MARGIN_S = 60.0
"""How much longer than the work's limit the sender of a call waits for its answer."""

_CHECKS = frozenset({"diagnostics", "run_tests", "skill_run"})
"""Tools that run in the session's sandbox under its wall clock."""


def shell_wall_s(session: SessionInfo, asked: object) -> float:
    """A `shell` call's wall clock: its `timeout_s`, up to the session's limit."""
    limit = session.limits.wall_s
    if isinstance(asked, int | float) and not isinstance(asked, bool) and 0 < asked < limit:
        return float(asked)
    return limit


def work_s(session: SessionInfo, tool: ToolSpec | None, tool_input: Mapping[str, Any]) -> float:
    """The longest the work of a call may take where it is done (0: a quick one)."""
    if tool is None:
        return 0.0
    if tool.server:
        return tool.call_timeout_s + UPSTREAM_MARGIN_S
    if tool.name == "shell":
        return shell_wall_s(session, tool_input.get("timeout_s"))
    if tool.name in _CHECKS:
        return session.limits.wall_s
    if tool.name == "fetch_url":
        return FETCH_S
    if tool.name == "web_search":
        return SEARCH_S
    return 0.0


def call_wait_s(session: SessionInfo, tool_name: str, tool_input: Mapping[str, Any]) -> float:
    """How long the sender of a call of `tool_name` waits for its answer."""
    tool = next((t for t in session.tools if t.name == tool_name), None)
    return work_s(session, tool, tool_input) + CALLER_MARGIN_S
