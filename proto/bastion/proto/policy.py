"""Asking the policy service whether a call may run, and its answer."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bastion.proto._base import Message, SessionId

__all__ = ["AUTONOMY_LEVELS", "Autonomy", "Effect", "Outcome", "PolicyDecision", "PolicyRequest"]

Autonomy = Literal["L0", "L1", "L2", "L3", "L4", "L5", "L6"]
"""How much a session may do without a person: L0 asks even to read, L6 runs everything."""

AUTONOMY_LEVELS: tuple[Autonomy, ...] = ("L0", "L1", "L2", "L3", "L4", "L5", "L6")

Effect = Literal["read", "write", "external", "spend"]
"""The most a call can do: read the workspace, change it, reach outside, or spend money."""

Outcome = Literal["allow", "ask", "deny"]


class PolicyRequest(Message, frozen=True, kw_only=True, tag="policy.request"):
    """A call about to run, described for the policy: who, which tool, what it may do."""

    session_id: SessionId
    tenant: str
    agent: str
    autonomy: Autonomy
    tool: str
    effect: Effect
    tainted: bool = False
    input_summary: Annotated[str, msgspec.Meta(max_length=512)] = ""


class PolicyDecision(Message, frozen=True, kw_only=True, tag="policy.decision"):
    """Allow, ask or deny, why in a sentence, and the rule that decided."""

    outcome: Outcome
    reason: str
    rule: str
