"""The whole decision, in order: level, then pre-approvals, then operator policies.

A call that spends money is asked wherever its level asks: no pre-approval, a skill's or
a person's "always" rule, turns that ask into a run (docs/architecture.md §4).

A pure function of the request and the operator policies in force, so that every
combination can be tested without a bus.
"""

from __future__ import annotations

from dataclasses import dataclass

from bastion.policy.levels import decide_by_level
from bastion.policy.narrowing import Narrowing, Verdict
from bastion.policy.preapproval import Rule, covers, parsed, uncovered_because
from bastion.policy.tools import SKILL_RUN_TOOL, target_kind
from bastion.proto.policy import SKILL_SOURCE_PREFIX, PolicyDecision, PolicyRequest, PreApproval

__all__ = ["Coverage", "coverage", "decide"]


@dataclass(frozen=True)
class Coverage:
    """What the session's pre-approvals say about one call."""

    covering: tuple[PreApproval, Rule] | None = None
    """The first rule in force that covers the call."""
    switched_off: PreApproval | None = None
    """A skill's rule that would cover it, were skill pre-approvals not off."""
    problems: tuple[str, ...] = ()
    """Sentences about rules that do not parse (they never match), and about command rules
    that name the command but may not cover it (the table of `commandtable` refuses it)."""


def _skill_of(source: str) -> str | None:
    return (
        source.removeprefix(SKILL_SOURCE_PREFIX) if source.startswith(SKILL_SOURCE_PREFIX) else None
    )


def _targets(request: PolicyRequest) -> tuple[str, ...]:
    """What a rule must cover: every path a file call touches, else its target."""
    if request.paths and target_kind(request.tool) == "path":
        return request.paths
    return (request.target,)


def coverage(request: PolicyRequest) -> Coverage:
    """Which of `request.pre_approvals` cover the call, ignoring taint."""
    covering: tuple[PreApproval, Rule] | None = None
    switched_off: PreApproval | None = None
    problems: list[str] = []
    for approval in request.pre_approvals:
        rule = parsed(approval.rule)
        if isinstance(rule, str):
            problems.append(f"{rule} (from {approval.source}; it was ignored)")
            continue
        skill = _skill_of(approval.source)
        limit = skill or approval.skill
        if limit and SKILL_RUN_TOOL in rule.tools and limit != request.skill:
            continue  # a rule of (or for) one skill covers its scripts, never another skill's
        if not all(covers(rule, request.tool, target) for target in _targets(request)):
            why = uncovered_because(rule, request.tool, request.target)
            if why is not None:
                problems.append(
                    f"{approval.source} pre-approves {rule.text}, but no rule covers this "
                    f"command: {why}"
                )
            continue
        if skill is not None and not request.skill_approvals:
            switched_off = switched_off or approval
        elif covering is None:
            covering = (approval, rule)
    return Coverage(covering, switched_off, tuple(problems))


def _after_preapprovals(request: PolicyRequest, level: PolicyDecision) -> PolicyDecision:
    """The level's *ask*, turned into *allow* if a pre-approval in force covers the call."""
    found = coverage(request)
    notes = list(found.problems)
    if found.covering is not None:
        approval, rule = found.covering
        if request.effect == "spend":
            return PolicyDecision(
                outcome="ask",
                reason=(
                    f"{level.reason}; {approval.source} pre-approves it ({rule.text}), but a "
                    "person approves every payment: no rule lifts the ask of a call that "
                    "spends money"
                ),
                rule=level.rule,
            )
        if request.tainted:
            return PolicyDecision(
                outcome="ask",
                reason=(
                    f"{level.reason}; {approval.source} pre-approves it ({rule.text}), but the "
                    "session has read content from outside, so pre-approvals are suspended "
                    "and a person must approve it until the taint expires"
                ),
                rule=level.rule,
                asked_because_tainted=True,
            )
        return PolicyDecision(
            outcome="allow",
            reason=(
                f"{request.tool} would ask at {request.autonomy}, but {approval.source} "
                f"pre-approves it with {rule.text}, so it runs without asking"
            ),
            rule=f"preapproval:{rule.text}",
            approved_by=f"{approval.source}: {rule.text}"
            + (f" (skill {approval.skill})" if approval.skill else ""),
        )
    if found.switched_off is not None:
        notes.append(
            f"{found.switched_off.source} pre-approves it ({found.switched_off.rule}), but "
            "skills' pre-approvals are off for this session (--no-skill-approvals)"
        )
    if not notes:
        return level
    return PolicyDecision(outcome="ask", reason="; ".join([level.reason, *notes]), rule=level.rule)


def _narrowed(decision: PolicyDecision, verdict: Verdict) -> PolicyDecision:
    """`decision` after an operator policy's verdict: only ever the same or narrower."""
    rule = f"cedar:{verdict.policy}"
    if verdict.outcome == "deny":
        return PolicyDecision(outcome="deny", reason=verdict.reason, rule=rule)
    if decision.outcome == "allow":
        reason = verdict.reason
        if decision.approved_by:
            reason += f" (a pre-approval, {decision.approved_by}, does not lift an operator's ask)"
        return PolicyDecision(outcome="ask", reason=reason, rule=rule)
    return PolicyDecision(
        outcome=decision.outcome,
        reason=f"{decision.reason}; {verdict.reason}",
        rule=decision.rule,
        asked_because_tainted=decision.asked_because_tainted,
    )


def decide(request: PolicyRequest, operator: Narrowing | None = None) -> PolicyDecision:
    """Allow, ask or deny `request`: level → pre-approvals (on an ask) → operator policies."""
    decision = decide_by_level(request.autonomy, request.tool, request.effect)
    if decision.outcome == "deny":
        return decision  # nothing after the level can widen a refusal, so nothing else runs
    if decision.outcome == "ask":
        decision = _after_preapprovals(request, decision)
    if operator is not None:
        verdict = operator.narrow(request)
        if verdict is not None:
            decision = _narrowed(decision, verdict)
    return decision
