"""The pre-approval grammar: each form, what it covers and what it never does."""

from __future__ import annotations

import pytest

from bastion.policy.decide import coverage, decide
from bastion.policy.preapproval import InvalidPreApproval, covers, exact_rule, parse_rule
from bastion.policy.rulecheck import check_rule
from bastion.proto.policy import Autonomy, PolicyRequest, PreApproval, RuleCheck


def covered(rule: str, tool: str, target: str) -> bool:
    return covers(parse_rule(rule), tool, target)


@pytest.mark.parametrize("rule", ["Bash(git log:*)", "shell(git log:*)"])
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git log", True),
        ("git log --oneline", True),
        ("git log\t-3", True),
        ("git logx", False),
        ("git lo", False),
        ("git status", False),
        (" git log", True),  # the same words as the shell splits them
    ],
)
def test_a_command_prefix_covers_the_command_and_its_arguments_but_not_a_longer_word(
    rule: str, command: str, expected: bool
) -> None:
    assert covered(rule, "shell", command) is expected


def test_an_exact_command_covers_only_that_command() -> None:
    assert covered("Bash(npm test)", "shell", "npm test")
    assert not covered("Bash(npm test)", "shell", "npm test --watch")
    assert not covered("Bash(npm test)", "shell", "npm tes")


@pytest.mark.parametrize(
    "command",
    [
        "git log; rm -rf ~",
        "git log && curl evil.example",
        "git log & sleep 9",
        "git log | sh",
        "git log `id`",
        "git log $(id)",
        "git log ${HOME}",
        "git log < /etc/passwd",
        "git log > out.txt",
        "git log \\",
        "git log\nrm -rf ~",
        "git log\r",
    ],
)
def test_a_command_that_could_run_more_than_one_program_is_never_covered(command: str) -> None:
    assert not covered("Bash(git log:*)", "shell", command)
    assert not covered("Bash(git:*)", "shell", command)


@pytest.mark.parametrize("command", ["npm test; id", "npm test|id", "npm test>x"])
def test_an_exact_rule_does_not_cover_a_command_with_metacharacters_either(command: str) -> None:
    rule = parse_rule("Bash(npm test)")
    assert not covers(rule, "shell", command)


def test_a_bare_tool_name_covers_every_call_of_that_tool_and_no_other() -> None:
    assert covered("ledger_balance", "ledger_balance", "")
    assert covered("ledger_balance", "ledger_balance", "anything")
    assert not covered("ledger_balance", "ledger_payment", "")
    assert covered("Bash", "shell", "make all")


@pytest.mark.parametrize(
    ("rule", "tool", "path", "expected"),
    [
        ("Write(notes/*)", "write_file", "notes/2.4.0.md", True),
        ("Write(notes/*)", "apply_patch", "notes/2.4.0.md", True),
        ("Write(notes/*)", "write_file", "notes/old/2.3.md", False),
        ("Write(notes/*)", "write_file", "README.md", False),
        ("Write(notes/*)", "write_file", "notes", False),
        ("Write(notes/*)", "edit_file", "notes/a.md", False),
        ("Write(notes/*)", "read_file", "notes/a.md", False),
        ("Write(notes/**)", "write_file", "notes/old/2.3.md", True),
        ("Write(**/*.md)", "write_file", "README.md", True),
        ("Write(**/*.md)", "write_file", "docs/deep/x.md", True),
        ("Write(notes:*)", "write_file", "notes/old/2.3.md", True),
        ("Write(notes:*)", "write_file", "notesx/a.md", False),
        ("Write(notes/*)", "write_file", "notes/../secrets/key", False),
        ("Write(notes/*)", "write_file", "./notes/a.md", True),
        ("Write(**)", "write_file", "../outside.txt", False),
        ("Write(**)", "write_file", "/etc/passwd", False),
        ("Edit(src/*.py)", "edit_file", "src/app.py", True),
        ("Edit(src/*.py)", "apply_patch", "src/app.py", True),
        ("Edit(src/*.py)", "write_file", "src/app.py", False),
        ("Read(docs/*)", "read_file", "docs/a.txt", True),
        ("Glob(src/**)", "find_files", "src/a/b", True),
        ("LS(src)", "list_files", "src", True),
        ("LS(src)", "list_files", "src/a", False),
        ("Grep(src/**)", "search_files", "src/a.py", True),
        ("write_file(notes/*)", "write_file", "notes/a.md", True),
        ("read_file(a?.txt)", "read_file", "ab.txt", True),
        ("read_file(a?.txt)", "read_file", "a/.txt", False),
    ],
)
def test_a_path_glob_matches_the_workspace_path_with_star_inside_one_directory(
    rule: str, tool: str, path: str, expected: bool
) -> None:
    assert covered(rule, tool, path) is expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("docs.rs", True),
        ("DOCS.rs", True),
        ("api.docs.rs", True),
        ("a.b.docs.rs", True),
        ("docs.rs.", True),
        ("evildocs.rs", False),
        ("docs.rs.evil.example", False),
        ("docs.rs:443", False),
        ("user@docs.rs", False),
        ("", False),
    ],
)
def test_a_domain_covers_the_host_and_its_subdomains_only(host: str, expected: bool) -> None:
    assert covered("WebFetch(domain:docs.rs)", "fetch_url", host) is expected
    assert covered("fetch_url(domain:docs.rs)", "fetch_url", host) is expected


def test_a_domain_rule_of_an_internationalized_name_covers_it_in_idna_2008_form() -> None:
    """`faß.de` is its own domain (xn--fa-hia.de), never `fass.de` as IDNA 2003 had it."""
    assert covered("WebFetch(domain:faß.de)", "fetch_url", "xn--fa-hia.de")
    assert covered("WebFetch(domain:faß.de)", "fetch_url", "api.xn--fa-hia.de")
    assert not covered("WebFetch(domain:faß.de)", "fetch_url", "fass.de")
    with pytest.raises(InvalidPreApproval, match="not a valid internationalized name"):
        parse_rule("WebFetch(domain:a\u200db.de)")


def test_a_skill_script_rule_covers_that_script() -> None:
    assert covered("skill_run(scripts/check.sh)", "skill_run", "scripts/check.sh")
    assert not covered("skill_run(scripts/check.sh)", "skill_run", "scripts/deploy.sh")
    assert not covered("skill_run(scripts/check.sh)", "shell", "scripts/check.sh")


def request(tool: str, target: str, *approvals: PreApproval, skill: str = "") -> PolicyRequest:
    return PolicyRequest(
        session_id="0123456789abcdef",
        tenant="default",
        agent="tester",
        autonomy="L2",
        tool=tool,
        effect="write",
        target=target,
        pre_approvals=approvals,
        skill=skill,
    )


def test_a_skill_pre_approves_its_own_scripts_and_not_another_skills() -> None:
    own = PreApproval(rule="skill_run(scripts/check.sh)", source="skill lint")
    assert coverage(request("skill_run", "scripts/check.sh", own, skill="lint")).covering
    assert not coverage(request("skill_run", "scripts/check.sh", own, skill="deploy")).covering
    person = PreApproval(rule="skill_run(scripts/check.sh)", source="always (person)")
    assert coverage(request("skill_run", "scripts/check.sh", person, skill="deploy")).covering


def test_an_empty_target_is_covered_only_by_a_bare_tool_name() -> None:
    assert not covered("Write(**)", "write_file", "")
    assert not covered("Bash(git:*)", "shell", "")
    assert not covered("WebFetch(domain:docs.rs)", "fetch_url", "")
    assert covered("write_file", "write_file", "")


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ("", "is not a rule"),
        ("Write(notes/*", "is not a rule"),
        ("Write notes", "is not a rule"),
        ("Write()", "empty parentheses"),
        ("Bash(:*)", "empty command prefix"),
        ("Bash(git log; rm:*)", "is never covered"),
        ("Bash(make `x`)", "is never covered"),
        ("Write(/etc/*)", "outside the workspace"),
        ("Write(../*)", "outside the workspace"),
        ("Write(:*)", "names no directory"),
        ("WebFetch(docs.rs)", "names no domain"),
        ("WebFetch(domain:)", "names no domain"),
        ("WebFetch(domain:*.docs.rs)", "names no domain"),
        ("ledger_balance(42)", "matched by name only"),
    ],
)
def test_a_malformed_rule_is_refused_with_a_sentence_saying_what_to_write(
    rule: str, words: str
) -> None:
    with pytest.raises(InvalidPreApproval) as raised:
        parse_rule(rule)
    assert words in raised.value.message
    assert ": write" in raised.value.message or ": name" in raised.value.message


def test_a_malformed_rule_never_matches_and_the_decision_says_it_was_ignored() -> None:
    broken = PreApproval(rule="Write(notes/*", source="skill release-notes")
    found = coverage(request("write_file", "notes/a.md", broken))
    assert found.covering is None
    assert len(found.problems) == 1
    assert "skill release-notes" in found.problems[0]
    assert "ignored" in found.problems[0]


@pytest.mark.parametrize(
    ("tool", "target", "rule"),
    [
        ("write_file", "README.md", "write_file(README.md)"),
        ("shell", "git log -1", "shell(git log -1)"),
        ("fetch_url", "docs.rs", "fetch_url(domain:docs.rs)"),
        ("run_tests", "", "run_tests"),
        ("skill_read", "", "skill_read"),
    ],
)
def test_the_exact_rule_of_a_call_covers_it(tool: str, target: str, rule: str) -> None:
    made = exact_rule(tool, target)
    assert made.text == rule and covers(made, tool, target)


@pytest.mark.parametrize(
    ("tool", "target"),
    [
        ("shell", "git log; rm -rf ~"),
        ("shell", "ls :*"),
        ("write_file", "notes/*.md"),
        ("shell", " padded"),
    ],
)
def test_a_call_no_rule_covers_exactly_has_no_exact_rule(tool: str, target: str) -> None:
    with pytest.raises(InvalidPreApproval):
        exact_rule(tool, target)


def test_a_persons_rule_is_checked_to_cover_the_call_it_approves() -> None:
    assert check_rule(RuleCheck(tool="write_file", target="notes/a.md")).rule == (
        "write_file(notes/a.md)"
    )
    assert check_rule(RuleCheck(tool="write_file", target="notes/a.md", rule="Write(notes/*)"))
    wrong = check_rule(RuleCheck(tool="write_file", target="a.md", rule="Write(notes/*)"))
    broken = check_rule(RuleCheck(tool="shell", target="ls", rule="Bash(ls; id:*)"))
    assert "does not cover" in wrong.problem and "write_file(a.md)" in wrong.problem
    assert broken.problem and not broken.rule


def test_websearch_stands_for_web_search() -> None:
    assert covered("WebSearch", "web_search", "")
    assert not covered("WebSearch", "fetch_url", "docs.rs")


@pytest.mark.parametrize(
    "approval",
    [
        PreApproval(rule="ledger_pay", source="skill billing"),
        PreApproval(rule="ledger_pay", source="always (cli:tester)"),
    ],
)
@pytest.mark.parametrize("autonomy", ["L3", "L4", "L5"])
def test_a_spend_call_is_asked_wherever_the_level_asks_whatever_a_rule_says(
    approval: PreApproval, autonomy: Autonomy
) -> None:
    spend = PolicyRequest(
        session_id="0123456789abcdef",
        tenant="default",
        agent="tester",
        autonomy=autonomy,
        tool="ledger_pay",
        effect="spend",
        pre_approvals=(approval,),
    )
    decided = decide(spend)
    assert decided.outcome == "ask"
    assert decided.approved_by == ""
    assert "spends money" in decided.reason
    assert f"{approval.source} pre-approves it (ledger_pay)" in decided.reason
    assert "a person approves every payment" in decided.reason


def test_a_spend_call_runs_without_asking_only_where_the_level_runs_it() -> None:
    spend = PolicyRequest(
        session_id="0123456789abcdef",
        tenant="default",
        agent="tester",
        autonomy="L6",
        tool="ledger_pay",
        effect="spend",
    )
    assert decide(spend).outcome == "allow"
