"""The bounds on what one upstream may send and how long it may take to greet us."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UpstreamLimits"]


@dataclass(frozen=True)
class UpstreamLimits:
    """Bounds on one upstream connection; whatever passes them is still untrusted."""

    max_message_bytes: int = 4 * 1024 * 1024
    """Any one JSON-RPC message from upstream (a stdio line, an HTTP body, an SSE event)."""
    max_tools: int = 1000
    """Tools, resources, resource templates or prompts listed, over every page."""
    connect_timeout_s: float = 30.0
    """Starting or reaching it and the handshake together."""
    max_pages: int = 100
    """Pages of one listing: a server whose cursors never end is cut off here."""
    max_questions: int = 5
    """Elicitation or sampling requests answered during one call; later ones are declined."""
