"""One connection's tools listings for the call-time pin check: the last one kept, and those
started ahead of a call (on the orchestrator's prefetch, `Ahead`).

A listing stands for what the server lists from the moment it was asked for. A change
notice (`notifications/tools/list_changed`, or a `subscriptions/listen` event on a
2026-07-28 connection) makes every listing asked for before it stale, the kept one and any
started ahead alike: it may predate the change. The kept listing stands for a later call
only when the operator lets it (`max_age_s` > 0, `BASTION_MCP_PIN_RECHECK_S`); by default
each call is checked against a listing asked for after it was made.
`docs/upstream-mcp.md` ("The call-time check") says what this leaves to a server.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import anyio
from mcp import types

__all__ = ["Ahead", "Asked", "ToolListing"]


@dataclass(frozen=True)
class Asked:
    """When a listing was asked for: the change notices counted then, and the monotonic time."""

    changes: int
    at: float


@dataclass
class Ahead:
    """A listing started for a call on its way: `done` is set once it is answered (`tools`,
    by name) or failed (`tools` None)."""

    asked: Asked
    done: anyio.Event = field(default_factory=anyio.Event)
    tools: dict[str, types.Tool] | None = None


@dataclass
class ToolListing:
    """The tools a connection last listed, by name, and the notices the server sent."""

    tools: dict[str, types.Tool] = field(default_factory=dict)
    asked: Asked = Asked(-1, -math.inf)
    """When the listing kept was asked for; before any, never."""
    changes: int = 0
    """How many change notices the server sent."""

    def changed(self) -> None:
        """The server said its tools changed (or can no longer say so): list them again."""
        self.changes += 1

    def asking(self) -> Asked:
        """What a listing about to be asked for is kept with (`keep`)."""
        return Asked(self.changes, time.monotonic())

    def keep(self, tools: list[types.Tool], asked: Asked) -> None:
        """Keep a listing asked for at `asked`, unless one asked for later is kept already."""
        if asked.at >= self.asked.at:
            self.tools = {tool.name: tool for tool in tools}
            self.asked = asked

    def unchanged_since(self, asked: Asked) -> bool:
        """No change notice came since `asked`."""
        return self.changes == asked.changes

    def fresh(self, max_age_s: float) -> bool:
        """Whether the operator lets the kept listing stand for one the server would give
        now: `max_age_s` > 0, no change notice since it was asked for, and asked for at most
        `max_age_s` ago."""
        if max_age_s <= 0 or not self.unchanged_since(self.asked):
            return False
        return time.monotonic() - self.asked.at <= max_age_s
