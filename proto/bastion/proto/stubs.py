"""Requests first written down before their service was built (egress's fetch), and the
lease request kept importable from here.

Both services are built now; the shapes stay here so that nothing that imports them breaks,
and widen as any message does (new fields last, with defaults).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from bastion.proto._base import Message, SessionId
from bastion.proto.vault import LeaseRequest  # kept importable from here

__all__ = ["FetchRequest", "LeaseRequest"]


class FetchRequest(Message, frozen=True, kw_only=True, tag="egress.fetch"):
    """Fetch a public page for a session; answered with an `egress.FetchedPage`."""

    session_id: SessionId
    url: Annotated[str, msgspec.Meta(min_length=1, max_length=8192)]
    format: str = "markdown"
    """`markdown`, `text` or `html`."""
    tenant: Annotated[str, msgspec.Meta(max_length=64)] = ""
    """Whose session: the connection is recorded in its audit log."""
