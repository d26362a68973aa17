"""Every level × effect × taint × pre-approval combination, decided by the pure function."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from bastion.policy.decide import decide
from bastion.proto.policy import AUTONOMY_LEVELS, Autonomy, Effect, PolicyRequest, PreApproval

EFFECTS: tuple[Effect, ...] = ("read", "write", "external", "spend")

DESIGN_TABLE = """
      read  write external spend
L0    ask   deny  deny     deny
L1    run   deny  deny     deny
L2    run   ask   deny     deny
L3    run   run   deny     ask
L4    run   run   ask      ask
L5    run   run   run      ask
L6    run   run   run      run
"""
"""docs/architecture.md §4, copied as written there, so the test does not read the code's own
table."""


def level_outcome(level: str, effect: Effect) -> str:
    rows = {line.split()[0]: line.split()[1:] for line in DESIGN_TABLE.strip().splitlines()[1:]}
    word = rows[level][EFFECTS.index(effect)]
    return "allow" if word == "run" else word


CALLS: dict[Effect, tuple[str, str, str, str]] = {
    "read": ("read_file", "docs/guide.md", "Read(docs/*)", "src/main.py"),
    "write": ("write_file", "notes/2.4.0.md", "Write(notes/*)", "README.md"),
    "external": ("fetch_url", "api.docs.rs", "WebFetch(domain:docs.rs)", "evildocs.rs"),
    "spend": ("ledger_pay", "", "ledger_pay", ""),
}
"""Per effect: a tool, a target its rule covers, the rule, and a target it does not cover."""

SOURCE = "skill release-notes"

CASES = list(itertools.product(AUTONOMY_LEVELS, EFFECTS, (False, True), (False, True)))


def policy_request(
    level: Autonomy,
    effect: Effect,
    tainted: bool,
    approvals: tuple[PreApproval, ...],
    *,
    covered: bool = True,
) -> PolicyRequest:
    tool, target, _, elsewhere = CALLS[effect]
    return PolicyRequest(
        session_id="0123456789abcdef",
        tenant="default",
        agent="tester",
        autonomy=level,
        tool=tool,
        effect=effect,
        tainted=tainted,
        target=target if covered else elsewhere,
        pre_approvals=approvals,
    )


def test_the_table_has_every_combination() -> None:
    assert len(CASES) == 7 * 4 * 2 * 2 == 112


@pytest.mark.parametrize(
    ("level", "effect", "tainted", "preapproved"),
    CASES,
    ids=[
        f"{lv}-{ef}-{'tainted' if t else 'clean'}-{'preapproved' if p else 'none'}"
        for lv, ef, t, p in CASES
    ],
)
def test_a_call_is_decided_by_level_then_pre_approval_unless_tainted(
    level: Autonomy, effect: Effect, tainted: bool, preapproved: bool
) -> None:
    rule = CALLS[effect][2]
    approvals = (PreApproval(rule=rule, source=SOURCE),) if preapproved else ()
    decision = decide(policy_request(level, effect, tainted, approvals))

    by_level = level_outcome(level, effect)
    lifted = by_level == "ask" and preapproved and effect != "spend"  # no rule lifts a spend
    expected = "allow" if lifted and not tainted else by_level
    assert decision.outcome == expected
    assert decision.approved_by == (f"{SOURCE}: {rule}" if lifted and not tainted else "")
    assert decision.asked_because_tainted == (lifted and tainted)
    if decision.approved_by:
        assert decision.rule == f"preapproval:{rule}"
        assert "runs without asking" in decision.reason and SOURCE in decision.reason
    else:
        assert decision.rule == f"level.{level}.{effect}"
    if decision.asked_because_tainted:
        assert "suspended" in decision.reason and "taint" in decision.reason
    assert CALLS[effect][0] in decision.reason  # the sentence names the tool it is about


@pytest.mark.parametrize(
    ("level", "effect", "tainted"),
    list(itertools.product(AUTONOMY_LEVELS, EFFECTS, (False, True))),
)
def test_a_pre_approval_that_does_not_cover_the_call_changes_nothing(
    level: Autonomy, effect: Effect, tainted: bool
) -> None:
    _, covered_target, rule, _ = CALLS[effect]
    other = rule if covered_target else "ledger_balance"  # a bare name covers any target
    approvals = (PreApproval(rule=other, source=SOURCE),)
    decision = decide(policy_request(level, effect, tainted, approvals, covered=False))
    assert decision.outcome == level_outcome(level, effect)
    assert decision.rule == f"level.{level}.{effect}"
    assert decision.approved_by == ""
    assert not decision.asked_because_tainted


def test_skills_pre_approvals_are_off_without_skill_approvals_but_a_persons_stay() -> None:
    skill = PreApproval(rule="Write(notes/*)", source=SOURCE)
    person = PreApproval(rule="Write(notes/*)", source="always (person)")
    off = msgspec.structs.replace(
        policy_request("L2", "write", False, (skill,)), skill_approvals=False
    )
    decision = decide(off)
    assert decision.outcome == "ask"
    assert "--no-skill-approvals" in decision.reason
    both = msgspec.structs.replace(off, pre_approvals=(skill, person))
    decision = decide(both)
    assert decision.outcome == "allow"
    assert decision.approved_by == "always (person): Write(notes/*)"


def test_a_pre_approval_never_lifts_a_refusal() -> None:
    decision = decide(
        policy_request("L2", "spend", False, (PreApproval(rule="ledger_pay", source=SOURCE),))
    )
    assert decision.outcome == "deny"
    assert decision.approved_by == ""
