"""Attacks on the policy gate: what a pre-approval, an "always" answer or an operator policy
names must be all it lets through, through real policy, sandbox and orchestrator services."""

from __future__ import annotations

import os
import subprocess
import tarfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.preapproval import covers, parse_rule
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import CallParked, CallResult, ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import answer, pending
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.front_door import Asked, DoorOf, mcp_client, new_token, read_json, text_of
from tests.helpers.session import call, open_session, session_of

OWNER = 1000
"""Workspaces belong to an unprivileged user: a root-owned one is refused by the sandbox."""


def owned(root: Path) -> None:
    """`root` and everything under it, given to the unprivileged owner."""
    for path in [root, *root.rglob("*")]:
        os.chown(path, OWNER, OWNER, follow_symlinks=False)


def skill(root: Path, name: str, allowed: str, scripts: dict[str, str] | None = None) -> None:
    (root / name / "scripts").mkdir(parents=True)
    (root / name / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: The {name} skill.\nallowed-tools: {allowed}\n---\n"
        "Use it.\n"
    )
    for path, text in (scripts or {}).items():
        (root / name / path).write_text(text)


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    path = tmp_path / "skills"
    path.mkdir()
    return path


@pytest.fixture
def plane_with_policies(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> Plane:
    """Policy (with the operator policies of `tmp_path/policies`), sandbox, orchestrator."""

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        sandbox = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "st"))
        orchestrator = OrchestratorSettings(nats_url=bus_settings.nats_url)
        policy = PolicySettings(
            nats_url=bus_settings.nats_url, policy_dir=str(tmp_path / "policies")
        )
        async with (
            run_service(sandbox_service, sandbox),
            run_service(orchestrator_service, orchestrator),
            run_service(policy_service, policy),
        ):
            yield

    return running


def asked(result: CallResult) -> bool:
    return isinstance(result, CallParked)


# Finding 4: a pre-approved prefix ran options that write files or run programs.

PWNED = "pwned"
GITCONFIG = f"""[safe]
\tdirectory = *
[diff]
\texternal = touch /workspace/{PWNED} ; true
[core]
\tpager = touch /workspace/{PWNED} ; cat
[alias]
\tlg = !touch /workspace/{PWNED}
"""
"""A .gitconfig in HOME (the workspace), as an agent could have written it."""


def git_repo(workspace: Path) -> None:
    env = {"HOME": str(workspace), "PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1"}
    safe = ["-c", "safe.directory=*"]
    for args in (
        ["init", "-q"],
        [
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "one",
        ],
    ):
        subprocess.run(["git", "-C", str(workspace), *safe, *args], check=True, env=env)
    (workspace / "a.txt").write_text("one\n")
    subprocess.run(["git", "-C", str(workspace), *safe, "add", "a.txt"], check=True, env=env)
    subprocess.run(
        [
            "git",
            "-C",
            str(workspace),
            *safe,
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "commit",
            "-q",
            "-m",
            "two",
        ],
        check=True,
        env=env,
    )
    (workspace / ".gitconfig").write_text(GITCONFIG)
    owned(workspace)


@pytest.mark.parametrize(
    "command",
    [
        "git log --output=planted.txt",
        "git log --out=planted.txt",
        "git log '--output=planted.txt'",
        "git log -p --ext-diff",
        "git log --patch",
        "git log -p",
        "git log --stat",
        "git log -c",
        "git -c core.pager=true log",
        "git --paginate log",
        "git -C . log",
        "git log --textconv -p",
    ],
)
async def test_a_git_log_prefix_never_covers_options_that_write_files_or_run_programs(
    client: Client, plane_with_policies: Plane, workspace: Path, skills_dir: Path, command: str
) -> None:
    git_repo(workspace)
    skill(skills_dir, "history", "Bash(git log:*)")
    async with plane_with_policies():
        session = await open_session(
            client, workspace=str(workspace), skills_dir=str(skills_dir), shell=True
        )
        sid = session.session_id
        await call(client, sid, "skill_read", name="history")
        plain = await call(client, sid, "shell", command="git log --oneline")
        attack = await call(client, sid, "shell", command=command)
    assert isinstance(plain, ToolOutput) and "two" in plain.text  # the rule is in force
    assert asked(attack), attack
    assert not (workspace / "planted.txt").exists()
    assert not (workspace / PWNED).exists()


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("Bash(git:*)", "git lg"),
        ("Bash(git:*)", "git status"),
        ("Bash(git:*)", "git diff HEAD~1"),
        ("Bash(find:*)", "find . -name a.txt -exec touch pwned +"),
        ("Bash(find:*)", "find . -name a.txt -delete"),
        ("Bash(sed:*)", "sed -i s/one/two/ a.txt"),
        ("Bash(sed:*)", "sed -n 's/one/two/w pwned' a.txt"),
        ("Bash(tar:*)", "tar -cf pwned a.txt"),
        ("Bash(awk:*)", "awk 'BEGIN { system(\"touch pwned\") }'"),
        ("Bash(xargs:*)", "xargs touch"),
        ("Bash(env:*)", "env touch pwned"),
        ("Bash(npm:*)", "npm run build"),
        ("Bash(find:*)", "find . -name -delete*"),
    ],
)
async def test_a_prefix_rule_never_covers_what_runs_another_program_or_writes_elsewhere(
    client: Client,
    plane_with_policies: Plane,
    workspace: Path,
    skills_dir: Path,
    rule: str,
    command: str,
) -> None:
    git_repo(workspace)
    before = (workspace / "a.txt").read_text()
    skill(skills_dir, "tools", rule)
    async with plane_with_policies():
        session = await open_session(
            client, workspace=str(workspace), skills_dir=str(skills_dir), shell=True
        )
        sid = session.session_id
        await call(client, sid, "skill_read", name="tools")
        attack = await call(client, sid, "shell", command=command)
    assert asked(attack), attack
    assert not (workspace / PWNED).exists()
    assert (workspace / "a.txt").read_text() == before


# Review F1: a word starting with an unset variable (`$Z--output=x`) reached the program as
# an option, past the table's look at the words that start with `-`.

EXPANDED = "Bash(git log:*) Bash(tar -tf:*) Bash(find:*)"


def tar_file(workspace: Path) -> None:
    with tarfile.open(workspace / "a.tar", "w") as archive:
        archive.add(workspace / "a.txt", arcname="a.txt")
    owned(workspace)


@pytest.mark.parametrize(
    "command",
    [
        "tar -tf a.tar $Z--checkpoint=1 $Z'--checkpoint-action=exec=touch /workspace/pwned'",
        "git log $Z--output=/workspace/pwned",
        "find . -name a.txt $Z-delete",
    ],
)
async def test_a_command_rule_never_covers_a_word_an_unset_variable_turns_into_an_option(
    client: Client, plane_with_policies: Plane, workspace: Path, skills_dir: Path, command: str
) -> None:
    git_repo(workspace)
    tar_file(workspace)
    skill(skills_dir, "tools", EXPANDED)
    async with plane_with_policies():
        session = await open_session(
            client, workspace=str(workspace), skills_dir=str(skills_dir), shell=True
        )
        sid = session.session_id
        await call(client, sid, "skill_read", name="tools")
        listed = await call(client, sid, "shell", command="tar -tf a.tar")
        attack = await call(client, sid, "shell", command=command)
    assert isinstance(listed, ToolOutput) and "a.txt" in listed.text  # the rules are in force
    assert asked(attack), attack
    assert not (workspace / PWNED).exists()
    assert (workspace / "a.txt").exists()


@pytest.mark.parametrize(
    "command",
    [
        "git log $1--output=x",
        "git log $@",
        "git log $$",
        'git log "$Z"--output=x',
        'git log "--grep=$Z"',
        "git log $'--output=x'",
        "git log --binary",
        "git log -W",
        "git log --function-context",
        "git log --inter-hunk-context=3",
        "git log --stat-width=10",
        "git log --stat-count=1",
        "git log -X",
        "git log --remerge-diff",
        "git log --dd",
        "git log --cc",
        "git log --diff-merges=on",
        "git log --raw",
        "git log --numstat",
        "git log --shortstat",
        "git log --dirstat=files",
        "git log --summary",
        "git log --name-only",
        "git log --name-status",
        "git log --check",
        "git log --word-diff=plain",
        "git log --color-moved=zebra",
        "git log --color-moved-ws=no",
        "git log --full-index",
        "git log --follow a.txt",
        "git log -B",
        "git log --an-option-git-adds-later",
    ],
)
def test_a_git_log_rule_never_covers_an_expansion_or_an_option_not_known_to_make_no_diff(
    command: str,
) -> None:
    assert not covers(parse_rule("Bash(git log:*)"), "shell", command)


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("Bash(git log:*)", "git log --oneline --author=t -n 5 --first-parent --abbrev=8"),
        ("Bash(git log:*)", "git log --graph --decorate=short --all --since=2.weeks -3 -- a"),
        ("Bash(git ls-tree:*)", "git ls-tree -r --name-only HEAD"),
        ("Bash(git log:*)", "git log --grep='$Z'"),
        ("Bash(awk:*)", "awk '{ print $1 }' a.txt"),
        ("Bash(awk:*)", "awk -F: -v n=1 -- '{ print $n }' a.txt"),
        ("Bash(sed:*)", "sed -nE --posix -e 's/a/b/g' -e 1p a.txt"),
        ("Bash(tar -tf:*)", "tar -tf a.tar -v"),
        ("Bash(tar:*)", "tar -tzvf a.tgz"),
    ],
)
def test_a_rule_still_covers_git_options_that_make_no_diff(rule: str, command: str) -> None:
    assert covers(parse_rule(rule), "shell", command)


# Second attack, A–C: sed, tar and awk options the table did not know take a value or run
# code (`sed -l 1p` made `1p` look like the script; `tar -M --volno-file`; mawk's `-W exec`).

READERS = "Bash(sed:*) Bash(tar -tf:*) Bash(awk:*)"
PROGRAM = f'BEGIN {{ system("touch /workspace/{PWNED}") }}\n'
"""An awk program the agent wrote into the workspace, run by `awk -W exec prog.txt`."""


@pytest.mark.parametrize(
    "command",
    [
        f"sed -n -l 1p '1e touch /workspace/{PWNED}' a.txt",
        f"sed -n --line-length 1p 'w {PWNED}' a.txt",
        f"sed -nl 1p 'e touch /workspace/{PWNED}' a.txt",
        f"tar -tf a.tar -M --volno-file={PWNED}",
        "awk -W exec prog.txt",
        "awk -Wexec prog.txt",
    ],
)
async def test_sed_tar_and_awk_rules_cover_only_options_of_an_allow_list(
    client: Client, plane_with_policies: Plane, workspace: Path, skills_dir: Path, command: str
) -> None:
    (workspace / "a.txt").write_text("one\n")
    (workspace / "prog.txt").write_text(PROGRAM)
    tar_file(workspace)
    skill(skills_dir, "readers", READERS)
    async with plane_with_policies():
        session = await open_session(
            client, workspace=str(workspace), skills_dir=str(skills_dir), shell=True
        )
        sid = session.session_id
        await call(client, sid, "skill_read", name="readers")
        listed = await call(client, sid, "shell", command="sed -n -e 1p a.txt")
        attack = await call(client, sid, "shell", command=command)
    assert isinstance(listed, ToolOutput) and "one" in listed.text  # the rules are in force
    assert asked(attack), attack
    assert not (workspace / PWNED).exists()


# Finding 8: "always" for one skill's script covered another skill's script of that name.


async def test_always_for_one_skills_script_never_covers_another_skills_script_of_that_name(
    client: Client, plane_with_policies: Plane, workspace: Path, skills_dir: Path
) -> None:
    skill(skills_dir, "lint", "skill_read", {"scripts/check.sh": "echo lint ran\n"})
    skill(skills_dir, "deploy", "skill_read", {"scripts/check.sh": "echo deploy ran\n"})
    async with plane_with_policies():
        session = await open_session(
            client, workspace=str(workspace), skills_dir=str(skills_dir), shell=True
        )
        sid = session.session_id
        first = await call(client, sid, "skill_run", name="lint", script="scripts/check.sh")
        [parked] = (await pending(client, sid)).approvals
        always = await answer(client, parked.request_id, approve=True, always=True)
        again = await call(client, sid, "skill_run", name="lint", script="scripts/check.sh")
        other = await call(client, sid, "skill_run", name="deploy", script="scripts/check.sh")
    assert asked(first)
    assert isinstance(always.result, ToolOutput) and "lint ran" in always.result.text
    assert isinstance(again, ToolOutput) and "lint ran" in again.text  # the rule holds
    assert asked(other), other
    assert again.decision.approved_by.endswith("(skill lint)")


# Finding 12 (first part): "always" on a compound command, answered through elicitation.


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_always_on_a_compound_command_through_elicitation_approves_it_once_saying_why(
    client: Client,
    plane_of: Plane,
    door_of: DoorOf,
    workspace: Path,
    mode: str,
) -> None:
    always = Asked({"decision": "always"})
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L2", shell=True)
        async with mcp_client(url, token, mode, elicit=always) as mcp:
            first = await mcp.call_tool("shell", {"command": "echo one; echo two"})
            second = await mcp.call_tool("shell", {"command": "echo one; echo two"})
            [listed] = (await read_json(mcp, "bastion://sessions"))["sessions"]
        info = await session_of(client, listed["session_id"])
    assert not first.is_error, text_of(first)
    assert "approved once" in text_of(first) and "one\ntwo" in text_of(first)
    assert "could run more than one program" in text_of(first)
    assert not second.is_error and len(always.messages) == 2  # no rule: it asked again
    assert not [a for a in info.pre_approvals if a.source.startswith("always")]


# Finding 5: a Cedar policy written on one tool was sidestepped by a tool doing the same.

NO_SECRETS = """
@id("no-secrets")
forbid (principal, action, resource in Tool::"write_file")
when { context.target like "secrets/*" };
"""

NO_SHELL = """
@id("no-shell")
forbid (principal, action, resource in Tool::"shell");
"""

PATCH_ONE_FILE = """*** Begin Patch
*** Add File: notes/a.md
+fine
*** End Patch
"""

PATCH_TWO_FILES = """*** Begin Patch
*** Add File: notes/a.md
+fine
*** Add File: secrets/key
+stolen
*** End Patch
"""


def policies(tmp_path: Path, text: str) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "operator.cedar").write_text(text)


async def test_a_forbid_on_write_file_paths_holds_for_every_path_an_apply_patch_touches(
    client: Client, plane_with_policies: Plane, workspace: Path, tmp_path: Path
) -> None:
    policies(tmp_path, NO_SECRETS)
    async with plane_with_policies():
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        patched = await call(client, sid, "apply_patch", patch=PATCH_TWO_FILES)
        plain = await call(
            client,
            sid,
            "apply_patch",
            patch=PATCH_ONE_FILE,
        )
    assert isinstance(patched, ErrorReply) and patched.code == "denied", patched
    assert "no-secrets" in patched.message and "secrets/key" in patched.message
    assert not (workspace / "secrets").exists()
    assert isinstance(plain, ToolOutput), plain  # the policy names secrets/ only
    assert (workspace / "notes" / "a.md").read_text() == "fine\n"


async def test_a_forbid_on_shell_holds_for_run_tests_which_runs_the_makefile(
    client: Client, plane_with_policies: Plane, workspace: Path, tmp_path: Path
) -> None:
    policies(tmp_path, NO_SHELL)
    (workspace / "Makefile").write_text("test:\n\techo tests ran\n")
    owned(workspace)
    async with plane_with_policies():
        session = await open_session(client, workspace=str(workspace), autonomy="L3", shell=True)
        sid = session.session_id
        tests = await call(client, sid, "run_tests")
        checks = await call(client, sid, "diagnostics")
        read = await call(client, sid, "read_file", path="Makefile")
    assert isinstance(tests, ErrorReply) and tests.code == "denied", tests
    assert isinstance(checks, ErrorReply) and checks.code == "denied", checks
    assert isinstance(read, ToolOutput)  # a forbid on commands is not one on reading


# Finding 7: a link inside the workspace widened a path rule.


@pytest.mark.parametrize(
    ("rule", "link", "points_to", "path"),
    [
        ("Write(notes:*)", "up", "..", "notes/up/planted.md"),
        ("Write(notes/*)", "planted.md", "../planted.md", "notes/planted.md"),
    ],
)
async def test_a_path_pre_approval_matches_where_a_write_lands_not_the_path_through_a_link(
    client: Client,
    plane_with_policies: Plane,
    workspace: Path,
    skills_dir: Path,
    rule: str,
    link: str,
    points_to: str,
    path: str,
) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / link).symlink_to(points_to)
    owned(workspace)
    skill(skills_dir, "release-notes", rule)
    async with plane_with_policies():
        session = await open_session(client, workspace=str(workspace), skills_dir=str(skills_dir))
        sid = session.session_id
        await call(client, sid, "skill_read", name="release-notes")
        inside = await call(client, sid, "write_file", path="notes/2.4.0.md", content="ok\n")
        through = await call(client, sid, "write_file", path=path, content="x")
    assert isinstance(inside, ToolOutput), inside  # the rule is in force
    assert asked(through), through
    assert not (workspace / "planted.md").exists()


async def test_a_cedar_path_condition_matches_the_path_after_the_workspaces_links(
    client: Client, plane_with_policies: Plane, workspace: Path, tmp_path: Path
) -> None:
    policies(tmp_path, NO_SECRETS)
    (workspace / "secrets").mkdir()
    (workspace / "docs").symlink_to("secrets")
    owned(workspace)
    async with plane_with_policies():
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        wrote = await call(client, sid, "write_file", path="docs/key", content="stolen")
        patched = await call(
            client,
            sid,
            "apply_patch",
            patch="*** Begin Patch\n*** Add File: docs/k2\n+x\n*** End Patch\n",
        )
    assert isinstance(wrote, ErrorReply) and wrote.code == "denied", wrote
    assert isinstance(patched, ErrorReply) and patched.code == "denied", patched
    assert list((workspace / "secrets").iterdir()) == []
