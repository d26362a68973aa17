"""The state of one connection to an upstream: alive, or broken and why.

A transport says *why* it broke (`break_with`) before it closes the streams the session
reads, so a call woken by "connection closed" can say what happened; a broken link is
stopped (the process group killed, the HTTP exchange cancelled) and never used again.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Link"]


class Link:
    """Whether a connection still holds, the first reason it broke, and how to stop it."""

    def __init__(self) -> None:
        self._reason: str | None = None
        self._stoppers: list[Callable[[], None]] = []

    @property
    def alive(self) -> bool:
        return self._reason is None

    @property
    def reason(self) -> str | None:
        """Why it broke (`stopped (exit status 1)`), or None while it holds."""
        return self._reason

    def on_break(self, stop: Callable[[], None]) -> None:
        """Call `stop` (synchronous, idempotent) when the link breaks."""
        self._stoppers.append(stop)

    def break_with(self, reason: str) -> None:
        """Break the link: the first reason given is kept, and the connection is stopped."""
        if self._reason is not None:
            return
        self._reason = reason
        for stop in self._stoppers:
            stop()
