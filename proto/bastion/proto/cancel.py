"""Cancelling a running call: who asks, what every service running part of it is told, and
the answer (docs/architecture.md, "Cancelling a call")."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bastion.proto._base import Ingress, Message, SessionId

__all__ = ["CallCancel", "CancelAnswer", "CancelCall", "CancelOutcome", "CancelledBy"]

CancelledBy = Annotated[
    str, msgspec.Meta(min_length=5, max_length=160, pattern=r"^(mcp|http|cli):.+$")
]
"""Who cancels: `mcp:<agent>`, `http:<label>` or `cli:<user>`."""


class CancelCall(Ingress, frozen=True, kw_only=True, tag="call.cancel"):
    """Cancel call `call_id` of the session named by the subject
    (`session.<id>.cancel`), on behalf of `by`."""

    call_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    by: CancelledBy


class CallCancel(Message, frozen=True, kw_only=True, tag="call.cancel.told"):
    """Told on `calls.cancel` to every replica of the orchestrator, sandbox and mcp
    services: whichever runs part of this call stops it."""

    session_id: SessionId
    call_id: str
    by: str


CancelOutcome = Literal["cancelled", "cancelling", "ended", "unknown"]
"""`cancelled`: it was running and has stopped; `cancelling`: it was told to stop and had not
yet when the answer left; `ended`: it had already ended (nothing done); `unknown`: the
session has no call of that id (nothing done)."""


class CancelAnswer(Message, frozen=True, kw_only=True, tag="call.cancel.answer"):
    """What a cancel did, with a sentence saying so."""

    session_id: SessionId
    call_id: str
    outcome: CancelOutcome
    message: str
