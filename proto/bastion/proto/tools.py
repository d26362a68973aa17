"""A tool call as an agent makes it, and its result: output, or a typed error."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from bastion.proto._base import Ingress, Message
from bastion.proto.errors import ErrorReply
from bastion.proto.policy import Effect, PolicyDecision

__all__ = ["CallResult", "ToolCall", "ToolName", "ToolOutput"]

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


class ToolOutput(Message, frozen=True, kw_only=True, tag="tool.output"):
    """A call that ran: the text the model is shown, and how it was allowed."""

    call_id: str
    tool: str
    effect: Effect
    text: str
    decision: PolicyDecision
    duration_s: float


CallResult = ToolOutput | ErrorReply
"""What `session.<id>.call` answers: the tool's output, or why there is none."""
