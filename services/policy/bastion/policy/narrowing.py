"""What operator policies may say about a call: nothing, ask a person, or refuse."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from bastion.proto.policy import PolicyRequest

__all__ = ["Narrowing", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    """An operator policy's word on a call: `policy` names it, `reason` is a whole sentence."""

    outcome: Literal["ask", "deny"]
    policy: str
    reason: str


class Narrowing(Protocol):
    """Operator policies, behind an engine-agnostic seam (Cedar today).

    An implementation does not know the level table, pre-approvals or taint rules: it is
    asked about every call that would run or ask, and may only narrow it. It never
    widens, and when it cannot evaluate a call it answers a refusal, never silence.
    """

    def narrow(self, request: PolicyRequest) -> Verdict | None:
        """None when no operator policy objects to the call; else the narrowing verdict."""
        ...
