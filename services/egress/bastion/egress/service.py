"""The egress service's setup: its endpoints, refusing until their issue lands."""

from __future__ import annotations

from bastion.proto import subjects
from bastion.proto.stubs import FetchRequest
from bastion.shared.placeholder import placeholder_service

__all__ = ["setup"]

setup = placeholder_service(
    "egress",
    "The only way out: the filtering proxy for sandboxes, fetch_url and web_search.",
    issue=5,
    endpoints={"fetch": (subjects.EGRESS_FETCH, FetchRequest)},
)
