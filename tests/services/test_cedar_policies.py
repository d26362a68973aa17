"""Operator policies in Cedar, through the bus: they narrow, never widen, and fail closed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec
import pytest

from bastion.policy.cedar_engine import compile_files, evaluate
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.policy import (
    Autonomy,
    Effect,
    PolicyDecision,
    PolicyRequest,
    PolicyStatus,
    PolicyStatusQuery,
    PreApproval,
)
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

NO_SECRETS = """
@id("no-secrets")
@reason("secrets/ holds the deploy keys")
forbid (principal, action == Action::"write", resource is Path)
when { context.target like "secrets/*" };
"""

NO_SHELL_FOR_ACME = """
@id("acme-no-shell")
forbid (principal in Tenant::"acme", action, resource in Tool::"shell");
"""

SHELL_ASKS = """
@id("shell-asks")
@ask("commands are reviewed by a person")
forbid (principal, action, resource in Tool::"shell");
"""

OVERFLOWS = """
@id("overflows")
forbid (principal, action, resource)
when { context.level + 9223372036854775807 < 0 };
"""
"""Valid against the schema, but its evaluation errors (an integer overflow) on every call."""

DOES_NOT_VALIDATE = """
@id("typo")
forbid (principal, action, resource) when { context.taineted };
"""

NOT_CEDAR = "forbid (principal, action, resource"


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    return directory


@pytest.fixture
def settings(bus_settings: BusSettings, policy_dir: Path, tmp_path: Path) -> PolicySettings:
    return PolicySettings(
        **msgspec.structs.asdict(bus_settings),
        state_dir=str(tmp_path / "state"),
        policy_dir=str(policy_dir),
        policy_poll_s=0.05,
    )


def policy_request(
    tool: str,
    effect: Effect,
    target: str = "",
    *,
    autonomy: Autonomy = "L3",
    tenant: str = "default",
    approvals: tuple[PreApproval, ...] = (),
) -> PolicyRequest:
    return PolicyRequest(
        session_id="0123456789abcdef",
        tenant=tenant,
        agent="tester",
        autonomy=autonomy,
        tool=tool,
        effect=effect,
        target=target,
        pre_approvals=approvals,
    )


async def decide(client: Client, ask: PolicyRequest) -> PolicyDecision:
    decision: PolicyDecision = await request(
        client, subjects.POLICY_DECIDE, ask, PolicyDecision, timeout_s=5
    )
    return decision


async def status(client: Client) -> PolicyStatus:
    answer: PolicyStatus = await request(
        client, subjects.POLICY_STATUS, PolicyStatusQuery(), PolicyStatus, timeout_s=5
    )
    return answer


async def status_when(client: Client, holds: Callable[[PolicyStatus], bool]) -> PolicyStatus:
    """Poll `policy.status` until `holds`, failing the test after 10 s."""
    with anyio.fail_after(10):
        while True:
            current = await status(client)
            if holds(current):
                return current
            await anyio.sleep(0.02)  # poll interval, not a wait for an outcome


async def test_a_forbid_on_a_path_turns_a_run_into_a_deny_and_names_the_policy(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, policy_dir: Path
) -> None:
    (policy_dir / "paths.cedar").write_text(NO_SECRETS)
    async with run_service(policy_service, settings):
        refused = await decide(client, policy_request("write_file", "write", "secrets/deploy.key"))
        elsewhere = await decide(client, policy_request("write_file", "write", "notes/a.md"))
        reading = await decide(client, policy_request("read_file", "read", "secrets/deploy.key"))
        detours = [
            await decide(client, policy_request("write_file", "write", path))
            for path in ("./secrets/deploy.key", "notes/../secrets/deploy.key")
        ]
    assert refused.outcome == "deny"
    assert refused.rule == "cedar:no-secrets"
    assert "no-secrets" in refused.reason and "deploy keys" in refused.reason
    assert elsewhere.outcome == "allow" and elsewhere.rule == "level.L3.write"
    assert reading.outcome == "allow"
    assert [d.rule for d in detours] == ["cedar:no-secrets"] * 2


async def test_a_forbid_on_a_tool_name_applies_to_the_principals_it_names(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, policy_dir: Path
) -> None:
    (policy_dir / "tools.cedar").write_text(NO_SHELL_FOR_ACME)
    async with run_service(policy_service, settings):
        acme = await decide(client, policy_request("shell", "write", "ls", tenant="acme"))
        other = await decide(client, policy_request("shell", "write", "ls", tenant="globex"))
        acme_writes = await decide(
            client, policy_request("write_file", "write", "a.txt", tenant="acme")
        )
    assert (acme.outcome, acme.rule) == ("deny", "cedar:acme-no-shell")
    assert other.outcome == "allow"
    assert acme_writes.outcome == "allow"


async def test_an_ask_annotation_turns_a_run_into_a_question_even_when_pre_approved(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, policy_dir: Path
) -> None:
    (policy_dir / "review.cedar").write_text(SHELL_ASKS)
    approval = PreApproval(rule="Bash(git log:*)", source="skill history")
    async with run_service(policy_service, settings):
        running = await decide(client, policy_request("shell", "write", "make"))
        preapproved = await decide(
            client,
            policy_request("shell", "write", "git log", autonomy="L2", approvals=(approval,)),
        )
    assert (running.outcome, running.rule) == ("ask", "cedar:shell-asks")
    assert "reviewed by a person" in running.reason
    assert preapproved.outcome == "ask"
    assert preapproved.approved_by == ""
    assert "skill history" in preapproved.reason


async def test_a_policy_whose_evaluation_errors_refuses_instead_of_being_skipped(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, policy_dir: Path
) -> None:
    (policy_dir / "overflow.cedar").write_text(OVERFLOWS)
    async with run_service(policy_service, settings):
        decision = await decide(client, policy_request("read_file", "read", "a.txt"))
    assert (decision.outcome, decision.rule) == ("deny", "cedar:overflows")
    assert "could not be evaluated" in decision.reason and "overflow" in decision.reason


async def test_a_policy_that_does_not_validate_is_rejected_at_load_and_nothing_runs(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, policy_dir: Path
) -> None:
    (policy_dir / "typo.cedar").write_text(DOES_NOT_VALIDATE)
    async with run_service(policy_service, settings):
        current = await status(client)
        decision = await decide(client, policy_request("read_file", "read", "a.txt"))
    assert current.generation == 0 and current.files == ()
    assert "typo.cedar" in current.error and "does not validate" in current.error
    assert decision.outcome == "deny"
    assert "rejected" in decision.reason and "typo.cedar" in decision.reason


async def test_a_broken_file_keeps_the_last_good_set_and_fixing_it_reloads(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, policy_dir: Path
) -> None:
    policy = policy_dir / "paths.cedar"
    policy.write_text(NO_SECRETS)
    async with run_service(policy_service, settings):
        first = await status(client)
        assert (first.files, first.policies, first.error) == (("paths.cedar",), 1, "")

        policy.write_text(NO_SECRETS + NOT_CEDAR)
        broken = await status_when(client, lambda s: bool(s.error))
        assert "paths.cedar is not valid Cedar" in broken.error
        assert "last good set stays in force" in broken.error
        assert (broken.generation, broken.files) == (first.generation, first.files)
        still = await decide(client, policy_request("write_file", "write", "secrets/deploy.key"))
        assert (still.outcome, still.rule) == ("deny", "cedar:no-secrets")

        policy.write_text(NO_SECRETS + NO_SHELL_FOR_ACME)
        fixed = await status_when(client, lambda s: s.generation > first.generation)
        assert (fixed.error, fixed.policies) == ("", 2)
        assert fixed.loaded_at is not None and first.loaded_at is not None
        assert fixed.loaded_at >= first.loaded_at
        shell = await decide(client, policy_request("shell", "write", "ls", tenant="acme"))
        assert shell.rule == "cedar:acme-no-shell"


async def test_a_permit_never_widens_what_the_level_refuses(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, policy_dir: Path
) -> None:
    (policy_dir / "wide.cedar").write_text(
        '@id("everything")\npermit (principal, action, resource);'
    )
    async with run_service(policy_service, settings):
        refused = await decide(
            client, policy_request("write_file", "write", "a.txt", autonomy="L1")
        )
        asked = await decide(client, policy_request("write_file", "write", "a.txt", autonomy="L2"))
    assert (refused.outcome, refused.rule) == ("deny", "level.L1.write")
    assert (asked.outcome, asked.rule) == ("ask", "level.L2.write")


async def test_no_policy_directory_means_no_operator_policies(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, tmp_path: Path
) -> None:
    absent = msgspec.structs.replace(settings, policy_dir=str(tmp_path / "absent"))
    async with run_service(policy_service, absent):
        current = await status(client)
        decision = await decide(client, policy_request("write_file", "write", "secrets/deploy.key"))
    assert (current.files, current.error, current.generation) == ((), "", 1)
    assert decision.outcome == "allow"


async def test_a_policy_directory_created_later_is_picked_up(
    client: Client, run_service: ServiceRunner, settings: PolicySettings, tmp_path: Path
) -> None:
    later = tmp_path / "later"
    async with run_service(
        policy_service, msgspec.structs.replace(settings, policy_dir=str(later))
    ):
        before = await status(client)
        later.mkdir()
        (later / "paths.cedar").write_text(NO_SECRETS)
        await status_when(client, lambda s: s.policies == 1)
        decision = await decide(client, policy_request("write_file", "write", "secrets/deploy.key"))
    assert before.policies == 0
    assert decision.rule == "cedar:no-secrets"


def _documented_policies() -> str:
    page = (Path(__file__).parents[2] / "docs" / "policies.md").read_text()
    block = page[page.index("// <state dir>/policies/workspace.cedar") :]
    return block[: block.index("```")]


@pytest.mark.parametrize(
    ("tool", "effect", "tenant", "paths", "expected"),
    [
        ("shell", "write", "acme", (), "acme-no-commands"),
        ("run_tests", "write", "acme", (), "acme-no-commands"),
        ("skill_run", "write", "acme", (), "acme-no-commands"),
        ("web_search", "external", "acme", (), None),
        ("apply_patch", "write", "other", ("notes/a.md", "secrets/key"), "no-secrets"),
        ("edit_file", "write", "other", ("secrets/key",), "no-secrets"),
        ("apply_patch", "write", "other", ("notes/a.md",), None),
    ],
)
def test_the_documented_policies_hold_for_every_tool_of_a_group_and_every_path_of_a_call(
    tool: str, effect: Effect, tenant: str, paths: tuple[str, ...], expected: str | None
) -> None:
    compiled = compile_files({"workspace.cedar": _documented_policies()})
    verdict = evaluate(
        compiled,
        PolicyRequest(
            session_id="0123456789abcdef",
            tenant=tenant,
            agent="tester",
            autonomy="L3",
            tool=tool,
            effect=effect,
            target=paths[0] if paths else "",
            paths=paths,
        ),
    )
    assert (verdict.policy if verdict else None) == expected
