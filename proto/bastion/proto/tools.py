"""A tool call as an agent makes it, and its result: output, a call parked for a person, or
a typed error."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from bastion.proto._base import Ingress, Message
from bastion.proto.errors import ErrorReply
from bastion.proto.policy import Effect, PolicyDecision

__all__ = [
    "CallParked",
    "CallResult",
    "NestedCall",
    "NestedResult",
    "ToolCall",
    "ToolName",
    "ToolOutput",
]

ToolName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z][A-Za-z0-9_\-]*$")
]


class ToolCall(Ingress, frozen=True, kw_only=True, tag="tool.call"):
    """One call of a tool of the session's catalogue, with the tool's own input."""

    tool: ToolName
    input: Annotated[dict[str, Any], msgspec.Meta(max_length=64)] = msgspec.field(
        default_factory=dict
    )
    call_id: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    stream: bool = False
    """Publish a `shell` command's output as it is written, on
    `subjects.call_output(session, call_id)` (with a `call_id` of letters, digits, `_` and
    `-`); the result is the same either way."""


class NestedCall(Message, frozen=True, kw_only=True, tag="tool.nested_call"):
    """A call a `run_code` program makes of one of the session's tools, relayed by the
    sandbox service (the only one that may send it) on `session.<id>.nested`: the parent is
    the run_code call whose program made it (docs/architecture.md §2.2)."""

    parent_call_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    tool: ToolName
    input: Annotated[dict[str, Any], msgspec.Meta(max_length=64)] = msgspec.field(
        default_factory=dict
    )


class NestedResult(Message, frozen=True, kw_only=True, tag="tool.nested_result"):
    """A nested call that ran: its text, as the program is given it."""

    call_id: str
    text: str


class ToolOutput(Message, frozen=True, kw_only=True, tag="tool.output"):
    """A call that ran: the text the model is shown, and how it was allowed."""

    call_id: str
    tool: str
    effect: Effect
    text: str
    decision: PolicyDecision
    duration_s: float


class CallParked(Message, frozen=True, kw_only=True, tag="tool.parked"):
    """A call that waits for a person: parked as approval `request_id` until a person
    approves (it runs then) or declines it; the session takes no other call meanwhile.

    `request_id` is the call's key in the approvals bucket (`subjects.APPROVALS_BUCKET`),
    so whoever waits for the answer can watch that key. `decision` says what the policy
    asks about; `message` is the sentence an agent is shown, saying how a person answers.
    """

    call_id: str
    tool: str
    session_id: str
    request_id: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    decision: PolicyDecision
    message: str


CallResult = ToolOutput | CallParked | ErrorReply
"""What `session.<id>.call` answers: the tool's output, the call parked for a person, or
why there is none."""
