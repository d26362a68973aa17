"""The autonomy-level table: what each level does with each effect."""

from __future__ import annotations

from typing import Final

from bastion.proto.policy import Autonomy, Effect, Outcome, PolicyDecision

__all__ = ["LEVEL_TABLE", "decide_by_level"]

LEVEL_TABLE: Final[dict[Autonomy, dict[Effect, Outcome]]] = {
    "L0": {"read": "ask", "write": "deny", "external": "deny", "spend": "deny"},
    "L1": {"read": "allow", "write": "deny", "external": "deny", "spend": "deny"},
    "L2": {"read": "allow", "write": "ask", "external": "deny", "spend": "deny"},
    "L3": {"read": "allow", "write": "allow", "external": "deny", "spend": "ask"},
    "L4": {"read": "allow", "write": "allow", "external": "ask", "spend": "ask"},
    "L5": {"read": "allow", "write": "allow", "external": "allow", "spend": "ask"},
    "L6": {"read": "allow", "write": "allow", "external": "allow", "spend": "allow"},
}
"""docs/architecture.md §4: rows are levels, columns effects; `allow` is the table's "run"."""

_EFFECT_PHRASE: Final[dict[Effect, str]] = {
    "read": "reads",
    "write": "changes the workspace",
    "external": "reaches outside",
    "spend": "spends money",
}


def _lowest_level(effect: Effect, outcome: Outcome) -> Autonomy | None:
    for level, row in LEVEL_TABLE.items():
        if row[effect] == outcome:
            return level
    return None


def decide_by_level(autonomy: Autonomy, tool: str, effect: Effect) -> PolicyDecision:
    """The level table's answer for a call of `tool` with `effect` at `autonomy`."""
    outcome = LEVEL_TABLE[autonomy][effect]
    rule = f"level.{autonomy}.{effect}"
    phrase = _EFFECT_PHRASE[effect]
    if outcome == "allow":
        reason = f"{tool} {phrase}, which {autonomy} runs without asking"
    elif outcome == "ask":
        runs_at = _lowest_level(effect, "allow")
        reason = f"{tool} {phrase}, which {autonomy} runs only once a person approves" + (
            f" (it runs without asking from {runs_at})" if runs_at else ""
        )
    else:
        asks_at = _lowest_level(effect, "ask")
        runs_at = _lowest_level(effect, "allow")
        reason = f"{tool} {phrase}, which {autonomy} does not allow: " + (
            f"it asks from {asks_at} and runs from {runs_at}"
            if asks_at and runs_at and asks_at != runs_at
            else f"it runs from {runs_at}"
        )
    return PolicyDecision(outcome=outcome, reason=reason, rule=rule)
