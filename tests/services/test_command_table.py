"""The table of commands and options no command rule covers (`bastion.policy.commandtable`)."""

from __future__ import annotations

import pytest

from bastion.policy.commandtable import refusal, words
from bastion.policy.decide import decide
from bastion.policy.preapproval import covers, exact_rule, parse_rule
from bastion.policy.rulecheck import check_rule
from bastion.proto.policy import PolicyRequest, PreApproval, RuleCheck
from bastion.shared.errors import InvalidInput


def refused(command: str, named: int = 1) -> str | None:
    split = words(command)
    assert split is not None
    return refusal(split, named)


@pytest.mark.parametrize(
    "command",
    [
        "git log",
        "git log --oneline -n 5",
        "git log --format='%h %s'",
        "git log --pretty=oneline",
        "git --no-pager log --graph --all",
        "git log -- a.txt",
        "git rev-parse HEAD",
        "git cat-file -p HEAD",
        "git shortlog -sn",
        "find . -name '*.py' -type f",
        "sed -n 1,5p a.txt",
        "sed -e 's/a/b/g' a.txt",
        "sed 's|a|b|2' a.txt",
        "tar -tf x.tar",
        "tar tvf x.tar",
        "tar --list --file=x.tar",
        "tar -tzvf x.tgz",
        "tar -t -f - --verbose",
        "tar tzf x.tgz a.txt",
        "sed -nE -e 1p -e 's/a/b/' --posix a.txt",
        "sed --quiet --expression=1d -- a.txt",
        "awk -F: -v n=1 -- '{ print $n }' a.txt",
        "awk -F , '{ print }' a.txt",
        "awk '{ print $1 }' a.txt",
        "ls -la",
        "make test",
        "sort -n a.txt",
        "uniq -c a.txt",
    ],
)
def test_a_command_that_only_does_what_it_names_is_not_refused(command: str) -> None:
    assert refused(command) is None


@pytest.mark.parametrize(
    "command",
    [
        "git log --output=x",
        "git log --out=x",
        "git log --outp x",
        "git log -p",
        "git log -pn3",
        "git log --patch",
        "git log --pa",
        "git log -u",
        "git log --ext-diff",
        "git log --textconv",
        "git log --stat",
        "git log --show-signature",
        "git log --pretty=mine",
        "git log --format=%GS",
        "git log -Sword",
        "git log -L1,2:a.txt",
        "git -c core.pager=sh log",
        "git -C /tmp log",
        "git --git-dir=/x log",
        "git --exec-path=/x log",
        "git -p log",
        "git --paginate log",
        "git status",
        "git diff",
        "git show",
        "git commit -m x",
        "git fetch",
        "git lg",
        "git cat-file --textconv HEAD:a",
        "git describe --dirty",
        "find . -exec id +",
        "find . -execdir id +",
        "find . -ok id +",
        "find . -delete",
        "find . -fprint out",
        "sed -i s/a/b/ f",
        "sed -ni p f",
        "sed --in-place s/a/b/ f",
        "sed --in s/a/b/ f",
        "sed -f script f",
        "sed 's/a/b/w out' f",
        "sed 's/a/b/e' f",
        "sed -e p -e 'w out' f",
        "sed '1r /etc/passwd' f",
        "tar -xf x.tar",
        "tar -cf x.tar .",
        "tar -tf x.tar --to-command=sh",
        "tar -tf x.tar --use-compress-program=sh",
        "tar -tf x.tar -I sh",
        "tar -tf host:x.tar",
        "tar -tf x.tar --checkpoint-action=exec=sh",
        "tar -f x.tar",
        "awk 'BEGIN { system(\"id\") }'",
        "awk -f prog.awk f",
        "gawk -l ./ext f",
        "awk -o out '{ print }' f",
        "tar -tf x.tar --to-command sh",
        "tar -t --file host:x.tar",
        "tar -tvfx.tar --info-script=sh",
        "sed -l",
        "sed -e",
        "sed --in-place=.bak s/a/b/ f",
        "sed --posix=x 1p f",
        "awk -E prog f",
        "awk --exec prog f",
        "awk -i lib '{ print }' f",
        "awk -p '{ print }' f",
        "awk '{ print }' -W f",
        "xargs rm",
        "env",
        "env -i id",
        "sudo id",
        "timeout 5 id",
        "nice id",
        "sh -c id",
        "curl docs.rs",
        "wget docs.rs",
        "rsync a b",
        "npx cowsay",
        "FOO=bar git log",
        "sort -o out a.txt",
        "sort --out=out a.txt",
        "sort --compress-program=sh a.txt",
        "uniq a.txt out",
        "/usr/bin/env id",
    ],
)
def test_an_option_that_writes_or_runs_a_program_is_refused_with_a_sentence(command: str) -> None:
    reason = refused(command)
    assert reason is not None and len(reason) > 20


def test_a_package_manager_is_covered_only_for_the_subcommand_the_rule_names() -> None:
    assert refused("npm run build", named=1) is not None
    assert refused("npm test --watch", named=2) is None
    assert refused("npm test --script-shell=/bin/evil", named=2) is not None
    assert refused("pip install x", named=1) is not None


@pytest.mark.parametrize(
    "command",
    [
        "git log *",
        "git log a?",
        "git log [a]",
        "ls {a,b}",
        "ls ~",
        "ls ~/x",
        "git log --output=~/x",
    ],
)
def test_a_word_the_shell_would_expand_leaves_the_command_unsplit(command: str) -> None:
    assert words(command) is None


def test_a_tilde_inside_a_word_is_not_expanded() -> None:
    assert words("git log HEAD~3..HEAD") == ["git", "log", "HEAD~3..HEAD"]
    assert refused("git log HEAD~3..HEAD") is None


def test_quoted_expansion_characters_are_plain_words() -> None:
    assert words("find . -name '*.py'") == ["find", ".", "-name", "*.py"]
    assert words('git log --grep="a*"') == ["git", "log", "--grep=a*"]
    assert words("git log 'unclosed") is None


def test_a_prefix_rule_matches_words_as_the_shell_splits_them() -> None:
    rule = parse_rule("Bash(git log:*)")
    assert covers(rule, "shell", "git  log  -3")
    assert covers(rule, "shell", "'git' log")
    assert not covers(rule, "shell", "git log --output=x")
    assert not covers(rule, "shell", "git logx")


def test_an_exact_rule_is_refused_for_a_command_the_table_refuses() -> None:
    with pytest.raises(InvalidInput) as raised:
        exact_rule("shell", "git log -p")
    assert "approve it once" in raised.value.message
    assert not covers(parse_rule("Bash(git log -p)"), "shell", "git log -p")


def test_a_rule_the_shell_would_expand_does_not_parse() -> None:
    with pytest.raises(InvalidInput):
        parse_rule("Bash(ls *:*)")


def test_always_for_a_command_no_rule_covers_says_to_approve_it_once() -> None:
    given = check_rule(RuleCheck(tool="shell", target="git log -p", rule="Bash(git log:*)"))
    made = check_rule(RuleCheck(tool="shell", target="echo a; echo b"))
    assert "approve it once" in given.problem and "patch" in given.problem
    assert "approve it once" in made.problem and "';'" in made.problem
    assert not given.rule and not made.rule


def test_a_rule_that_does_not_cover_its_call_is_never_answered_with_the_bare_tool_name() -> None:
    wrong = check_rule(RuleCheck(tool="write_file", target="notes/*.md", rule="Write(a)"))
    assert "approve it once" in wrong.problem
    assert not wrong.problem.endswith("such as write_file")


def test_the_decision_says_why_a_rule_naming_the_command_did_not_cover_it() -> None:
    ask = PolicyRequest(
        session_id="0123456789abcdef",
        tenant="default",
        agent="tester",
        autonomy="L2",
        tool="shell",
        effect="write",
        target="git log --out=planted.txt",
        pre_approvals=(PreApproval(rule="Bash(git log:*)", source="skill history"),),
    )
    decision = decide(ask)
    assert decision.outcome == "ask"
    assert "skill history pre-approves Bash(git log:*), but no rule covers" in decision.reason
    assert "--output" in decision.reason


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("sed -n -l 1p '1e id' /etc/hostname", "'-l'"),
        ("sed -n --line-length 1p 'w pwned' f", "'--line-length'"),
        ("sed -nl 1p 'e id' f", "'-l' (in '-nl')"),
        ("sed -n --follow-symlinks 1p f", "'--follow-symlinks'"),
        ("sed -s -n -i 1p f", "'-i'"),
        ("sed --qui 1p f", "'--qui'"),
        ("tar -tf a.tar -M --volno-file=pwned_tar", "'-M'"),
        ("tar -tf a.tar --volno-file=pwned_tar", "'--volno-file' (in '--volno-file=pwned_tar')"),
        ("tar tMf a.tar", "'M' (in 'tMf')"),
        ("tar -tOf a.tar", "'-O' (in '-tOf')"),
        ("awk -W exec prog.txt", "'-W'"),
        ("awk -Wexec f", "'-W' (in '-Wexec')"),
        ("awk -v x=1 -f prog f", "'-f'"),
        ("gawk --load=ext f", "'--load' (in '--load=ext')"),
        ("mawk -W interactive '{ print }'", "'-W'"),
    ],
)
def test_an_option_off_the_allow_list_of_sed_tar_or_awk_asks_naming_it(
    command: str, option: str
) -> None:
    reason = refused(command)
    assert reason is not None and f"'s {option} is not among the options" in reason


def test_a_value_taking_option_takes_its_value_so_the_script_is_the_word_sed_runs() -> None:
    assert refused("sed -n -e 1p -e '1e id' f") is not None
    assert refused("sed -ne '1e id' f") is not None
    assert refused("sed -n -- '1e id' f") is not None
    assert refused("sed -nep f") is None
    assert refused("awk -v 'x=1' 'BEGIN { system(\"id\") }'") is not None
    assert refused("tar tf host:x.tar") is not None
    assert refused("tar -tvf a.tar -f -t") is None
    assert refused("tar -vf -t") is not None
