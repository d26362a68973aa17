"""Parked calls waiting for a person, listing them, and answering one."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from bastion.proto._base import Identifier, Ingress, Message, SessionId
from bastion.proto.policy import PolicyDecision
from bastion.proto.tools import CallResult

__all__ = [
    "ApprovalAnswer",
    "ApprovalAnswered",
    "ApprovalList",
    "ApprovalQuery",
    "ApprovalState",
    "ParkedCall",
    "RequestId",
]

ApprovalState = Literal["pending", "approved", "declined", "running", "done", "uncertain"]
"""pending → running → done (approved: the call ran once), pending → declined; a call found
`running` after a restart is `uncertain` and never runs again."""

RequestId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}$")]
"""An approval request's id: 16 lowercase hex digits, also its KV key."""


class ParkedCall(Message, frozen=True, kw_only=True, tag="approval.parked"):
    """A call a person must answer, as kept in the `bastion_approvals` bucket.

    `decision` is the policy's *ask* (its reason, and whether it asked only because of
    taint); `answered_by` / `answer` say who answered and, for a decline, why; `rule` is
    the "always" rule the approval added; `result` is the call's outcome once it ran or
    was declined; `runner` names the orchestrator instance that ran it; `traceparent` is
    the W3C trace context of the call that was parked, so that its approved run, in the
    answer's trace, links back to it (empty when the call was not traced).
    """

    request_id: RequestId
    session_id: SessionId
    tenant: str
    agent: str
    call_id: str
    tool: str
    input: dict[str, Any]
    decision: PolicyDecision
    created_at: datetime
    state: ApprovalState = "pending"
    answered_by: str = ""
    answered_at: datetime | None = None
    answer: str = ""
    rule: str = ""
    result: CallResult | None = None
    runner: str = ""
    traceparent: Annotated[str, msgspec.Meta(max_length=128)] = ""
    stream: bool = False
    """The call was sent with `stream` (`ToolCall.stream`): once approved, its output is
    published as it comes, as it would have been had it run at once."""


class ApprovalQuery(Ingress, frozen=True, kw_only=True, tag="approval.query"):
    """Which parked calls to list: of one session, of one tenant, or all; pending ones only
    unless `every_state`."""

    session_id: SessionId | None = None
    tenant: Identifier | None = None
    every_state: bool = False


class ApprovalList(Message, frozen=True, kw_only=True, tag="approval.list"):
    """The parked calls a query asked for, oldest first."""

    approvals: tuple[ParkedCall, ...] = ()


class ApprovalAnswer(Ingress, frozen=True, kw_only=True, tag="approval.answer"):
    """A person's answer to one parked call.

    `approve` runs it once; with `always` the session also gets a pre-approval: `rule`, or
    when empty the rule of exactly this call. A decline (`approve` False) gives the call a
    `declined` result carrying `reason`. `by` names who answered (`cli:alice`).
    """

    request_id: RequestId
    approve: bool
    by: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    always: bool = False
    rule: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    reason: Annotated[str, msgspec.Meta(max_length=1024)] = ""


class ApprovalAnswered(Message, frozen=True, kw_only=True, tag="approval.answered"):
    """The parked call after the answer, and the call's result (its output or the error)."""

    approval: ParkedCall
    result: CallResult
