"""A person's "always" rule checked against the call it approves, or made for exactly it."""

from __future__ import annotations

from bastion.policy.preapproval import (
    InvalidPreApproval,
    command_refusal,
    covers,
    exact_rule,
    parse_rule,
)
from bastion.policy.tools import normalised_target
from bastion.proto.policy import RuleCheck, RuleChecked

__all__ = ["check_rule"]


def check_rule(check: RuleCheck) -> RuleChecked:
    """The rule in force after the check, or the sentence saying why there is none."""
    target = normalised_target(check.tool, check.target)
    try:
        if not check.rule.strip():
            return RuleChecked(rule=exact_rule(check.tool, target).text)
        rule = parse_rule(check.rule)
    except InvalidPreApproval as error:
        return RuleChecked(problem=error.message)
    if not covers(rule, check.tool, target):
        if rule.kind in ("prefix", "exact"):
            why = command_refusal(target, len(rule.words) if rule.kind == "prefix" else None)
            if why is not None:
                return RuleChecked(
                    problem=(
                        f"no rule can cover this command ({why}), so it cannot be approved "
                        "always: approve it once instead"
                    )
                )
        return RuleChecked(
            problem=(
                f"the rule {rule.text} does not cover the call it would approve "
                f"({check.tool} {target[:200]}): {_suggestion(check.tool, target)}"
            )
        )
    return RuleChecked(rule=rule.text)


def _suggestion(tool: str, target: str) -> str:
    """What to give instead: the exact rule of the call, or, with none, approving it once
    (never the bare tool name, which would cover every call of the tool)."""
    try:
        return f"give a rule that covers it, such as {exact_rule(tool, target).text}"
    except InvalidPreApproval:
        return "give a rule that covers it, or approve it once"
