"""One connection's last tools listing, kept for the call-time pin check while it is fresh.

A listing is fresh until the server says its tools changed (`notifications/tools/list_changed`,
or a `subscriptions/listen` event on a 2026-07-28 connection) or until it is older than the
bound a check asks for. A notice that arrives while a listing is being fetched makes that
listing stale as soon as it is kept: it may predate the change. `docs/upstream-mcp.md` says
what this leaves to a server that changes a tool without saying so.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from mcp import types

__all__ = ["ToolListing"]


@dataclass
class ToolListing:
    """The tools a connection last listed, by name, and whether the server changed them since."""

    tools: dict[str, types.Tool] = field(default_factory=dict)
    listed_at: float = -math.inf
    """When (monotonic seconds) the listing kept was asked for; -inf before any."""
    changes: int = 0
    """How many change notices the server sent."""
    _listed_after: int = -1
    """How many notices had arrived when the listing kept was asked for."""

    def changed(self) -> None:
        """The server said its tools changed (or can no longer say so): list them again."""
        self.changes += 1

    def asking(self) -> tuple[int, float]:
        """What a listing about to be asked for is kept with (`keep`)."""
        return self.changes, time.monotonic()

    def keep(self, tools: list[types.Tool], asked: tuple[int, float]) -> None:
        """Keep a listing asked for at `asked`."""
        self.tools = {tool.name: tool for tool in tools}
        self._listed_after, self.listed_at = asked

    def fresh(self, max_age_s: float) -> bool:
        """Whether the listing kept may stand for one the server would give now: no change
        notice since it was asked for, and asked for at most `max_age_s` ago."""
        if self._listed_after != self.changes:
            return False
        return time.monotonic() - self.listed_at <= max_age_s
