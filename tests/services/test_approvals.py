"""Durable approvals, taint and skills' pre-approvals, through real services on a real bus."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from bastion.orchestrator.approvalstore import ApprovalStore
from bastion.proto.approvals import ApprovalAnswered
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import CallParked, ToolOutput
from bastion.shared.bus import Client
from bastion.shared.errors import RemoteError
from tests.helpers.approvals import answer, as_running, pending, records_of
from tests.helpers.bus import Plane
from tests.helpers.session import call, open_session, session_of

SKILL = """---
name: release-notes
description: Write a release's notes under notes/ in the workspace.
allowed-tools: Write(notes/*)
---

Write the notes of each release to notes/<version>.md with write_file.
"""


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    path = tmp_path / "skills"
    (path / "release-notes").mkdir(parents=True)
    (path / "release-notes" / "SKILL.md").write_text(SKILL)
    return path


async def test_an_ask_parks_the_call_lists_it_and_the_session_waits_until_a_person_answers(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace))
        sid = session.session_id
        parked = await call(client, sid, "write_file", path="README.md", content="x")
        listed = await pending(client, sid)
        again = await call(client, sid, "read_file", path="README.md")
        waiting = await session_of(client, sid)
    assert isinstance(parked, CallParked) and parked.tool == "write_file"
    [entry] = listed.approvals
    assert parked.request_id == entry.request_id and parked.input == entry.input
    assert entry.tool == "write_file" and entry.state == "pending"
    assert entry.input == {"path": "README.md", "content": "x"}
    assert "L2 runs only once a person approves" in entry.decision.reason
    assert entry.request_id in parked.message
    assert f"bastion agent continue {sid} --approve" in parked.message
    assert isinstance(again, ErrorReply) and again.code == "waiting_for_approval"
    assert "no other call runs" in again.message and entry.request_id in again.message
    assert waiting.waiting_for == entry.request_id
    assert not (workspace / "README.md").exists()


async def test_an_approved_call_runs_exactly_once_and_a_second_answer_is_told_it_was_answered(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True)
        sid = session.session_id
        await call(client, sid, "shell", command="echo ran >> log")
        [entry] = (await pending(client, sid)).approvals
        outcomes: list[ApprovalAnswered | RemoteError] = []

        async def approve() -> None:
            try:
                outcomes.append(await answer(client, entry.request_id, approve=True))
            except RemoteError as error:
                outcomes.append(error)

        async with anyio.create_task_group() as racing:
            racing.start_soon(approve)
            racing.start_soon(approve)
        with pytest.raises(RemoteError) as late:
            await answer(client, entry.request_id, approve=True)
        after = await call(client, sid, "read_file", path="log")
        kept = await pending(client, sid, every_state=True)
    ran = [o for o in outcomes if isinstance(o, ApprovalAnswered)]
    refused = [o for o in outcomes if isinstance(o, RemoteError)]
    assert len(ran) == 1 and len(refused) == 1 and refused[0].code == "conflict"
    assert isinstance(ran[0].result, ToolOutput) and ran[0].result.text.startswith("exit status 0")
    assert ran[0].result.decision.rule == f"approval:{entry.request_id}"
    assert late.value.code == "conflict" and "already answered by cli:tester" in late.value.message
    assert (workspace / "log").read_text() == "ran\n"
    assert isinstance(after, ToolOutput)  # the session no longer waits
    [done] = kept.approvals
    assert done.state == "done" and done.answered_by == "cli:tester"
    assert isinstance(done.result, ToolOutput)


async def test_a_declined_call_answers_declined_naming_who_and_why_and_never_runs(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace))
        sid = session.session_id
        await call(client, sid, "write_file", path="README.md", content="x")
        [entry] = (await pending(client, sid)).approvals
        declined = await answer(
            client, entry.request_id, approve=False, reason="leave the README as it is"
        )
        listed = await pending(client, sid)
        after = await call(client, sid, "read_file", path="nothing.txt")
    assert isinstance(declined.result, ErrorReply) and declined.result.code == "declined"
    assert declined.result.message == (
        "a person (cli:tester) declined this call: leave the README as it is"
    )
    assert declined.approval.state == "declined" and listed.approvals == ()
    assert isinstance(after, ErrorReply) and after.code == "not_found"  # it ran: no longer waits
    assert not (workspace / "README.md").exists()


async def test_an_always_answer_lets_the_same_call_run_again_and_a_given_rule_similar_ones(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace))
        sid = session.session_id
        await call(client, sid, "write_file", path="README.md", content="1")
        [first] = (await pending(client, sid)).approvals
        exact = await answer(client, first.request_id, approve=True, always=True)
        same = await call(client, sid, "write_file", path="README.md", content="2")
        await call(client, sid, "write_file", path="notes/a.md", content="a")
        [second] = (await pending(client, sid)).approvals
        with pytest.raises(RemoteError) as not_covering:
            await answer(client, second.request_id, approve=True, always=True, rule="Write(doc/*)")
        with pytest.raises(RemoteError) as not_a_rule:
            await answer(client, second.request_id, approve=True, always=True, rule="Write(")
        ruled = await answer(
            client, second.request_id, approve=True, always=True, rule="Write(notes/*)"
        )
        similar = await call(client, sid, "write_file", path="notes/b.md", content="b")
        elsewhere = await call(client, sid, "write_file", path="other.md", content="o")
        info = await session_of(client, sid)
    assert exact.approval.rule == "write_file(README.md)"
    assert isinstance(same, ToolOutput)
    assert same.decision.approved_by == "always (cli:tester): write_file(README.md)"
    assert not_covering.value.code == "invalid_input"
    assert "does not cover" in not_covering.value.message
    assert "write_file(notes/a.md)" in not_covering.value.message
    assert not_a_rule.value.code == "invalid_input"
    assert ruled.approval.rule == "Write(notes/*)" and isinstance(ruled.result, ToolOutput)
    assert isinstance(similar, ToolOutput) and "Write(notes/*)" in similar.decision.approved_by
    assert isinstance(elsewhere, CallParked)
    assert [(a.rule, a.source) for a in info.pre_approvals] == [
        ("write_file(README.md)", "always (cli:tester)"),
        ("Write(notes/*)", "always (cli:tester)"),
    ]
    assert (workspace / "README.md").read_text() == "2"


async def test_a_session_with_nobody_to_ask_is_refused_at_once_naming_the_flag(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), ask=False)
        refused = await call(client, session.session_id, "write_file", path="a", content="x")
        listed = await pending(client, session.session_id)
    assert isinstance(refused, ErrorReply) and refused.code == "needs_approval"
    assert "--no-ask" in refused.message and "runs without asking from L3" in refused.message
    assert listed.approvals == () and not (workspace / "a").exists()


async def test_a_result_from_outside_taints_the_session_and_suspends_a_persons_rule(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(
            client, workspace=str(workspace), shell=True, network="host", autonomy="L4"
        )
        sid = session.session_id
        await call(client, sid, "shell", command="echo one")
        [first] = (await pending(client, sid)).approvals
        ran = await answer(
            client, first.request_id, approve=True, always=True, rule="shell(echo:*)"
        )
        info = await session_of(client, sid)
        asked = await call(client, sid, "shell", command="echo two")
        [second] = (await pending(client, sid)).approvals
    assert isinstance(ran.result, ToolOutput) and "one" in ran.result.text
    assert info.tainted_until is not None and info.tainted_until > datetime.now(UTC)
    assert isinstance(asked, CallParked) and asked.request_id == second.request_id
    assert "because the session is tainted" in asked.message
    assert second.decision.asked_because_tainted
    assert "pre-approvals are suspended" in second.decision.reason


async def test_without_taint_the_same_rule_lets_the_next_external_call_run(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of(taint_s=0):
        session = await open_session(
            client, workspace=str(workspace), shell=True, network="host", autonomy="L4"
        )
        sid = session.session_id
        await call(client, sid, "shell", command="echo one")
        [first] = (await pending(client, sid)).approvals
        await answer(client, first.request_id, approve=True, always=True, rule="shell(echo:*)")
        ran = await call(client, sid, "shell", command="echo two")
    assert isinstance(ran, ToolOutput) and "two" in ran.text
    assert ran.decision.approved_by == "always (cli:tester): shell(echo:*)"


@pytest.mark.parametrize("skill_approvals", [True, False])
async def test_reading_a_skill_adds_its_allowed_tools_unless_skill_approvals_are_off(
    client: Client, plane_of: Plane, workspace: Path, skills_dir: Path, skill_approvals: bool
) -> None:
    async with plane_of():
        session = await open_session(
            client,
            workspace=str(workspace),
            skills_dir=str(skills_dir),
            skill_approvals=skill_approvals,
        )
        sid = session.session_id
        read = await call(client, sid, "skill_read", name="release-notes")
        notes = await call(client, sid, "write_file", path="notes/2.4.0.md", content="# 2.4.0\n")
        info = await session_of(client, sid)
    assert "skill_read" in [t.name for t in session.tools]
    assert isinstance(read, ToolOutput) and read.text == SKILL
    assert [(a.rule, a.source) for a in info.pre_approvals] == [
        ("Write(notes/*)", "skill release-notes")
    ]
    if skill_approvals:
        assert isinstance(notes, ToolOutput)
        assert notes.decision.approved_by == "skill release-notes: Write(notes/*)"
    else:
        assert isinstance(notes, CallParked)
        assert "--no-skill-approvals" in notes.message


async def test_a_parked_call_survives_a_restart_of_every_service_and_then_runs_once(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True)
        sid = session.session_id
        await call(client, sid, "shell", command="echo ran >> log")
    async with plane_of():  # new instances of all three
        [entry] = (await pending(client, sid)).approvals
        ran = await answer(client, entry.request_id, approve=True)
        with pytest.raises(RemoteError) as twice:
            await answer(client, entry.request_id, approve=True)
    assert isinstance(ran.result, ToolOutput)
    assert twice.value.code == "conflict"
    assert (workspace / "log").read_text() == "ran\n"


async def test_a_call_found_running_after_a_restart_is_uncertain_and_never_runs_again(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True)
        sid = session.session_id
        await call(client, sid, "shell", command="echo ran >> log")
        [entry] = (await pending(client, sid)).approvals
    # As if an orchestrator died between pending → running and running → done.
    store = await ApprovalStore.open(client, "bastion_approvals")
    await store.move(entry.request_id, ("pending",), as_running)
    async with plane_of():
        [found] = (await pending(client, sid, every_state=True)).approvals
        with pytest.raises(RemoteError) as refused:
            await answer(client, entry.request_id, approve=True)
        after = await call(client, sid, "read_file", path="log")
    assert found.state == "uncertain"
    assert refused.value.code == "conflict" and "uncertain" in refused.value.message
    assert isinstance(after, ErrorReply) and after.code == "not_found"  # it never ran
    assert not (workspace / "log").exists()


async def test_with_the_policy_service_stopped_calls_fail_closed_and_say_why(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of(policy=False):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        refused = await call(client, session.session_id, "write_file", path="a", content="x")
    assert isinstance(refused, ErrorReply) and refused.code == "unavailable"
    assert "the policy service does not answer" in refused.message
    assert "no call runs until a policy service answers" in refused.message
    assert not (workspace / "a").exists()


async def test_every_approval_asked_and_answered_is_in_the_audit_log(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace))
        sid = session.session_id
        await call(client, sid, "write_file", path="a.txt", content="a")
        [first] = (await pending(client, sid)).approvals
        await answer(client, first.request_id, approve=True)
        await call(client, sid, "write_file", path="b.txt", content="b")
        [second] = (await pending(client, sid)).approvals
        await answer(client, second.request_id, approve=False, reason="not b")
        records = [r for _, r in await records_of(client, "default", sid)]
    approvals = [(r.outcome, r.by, r.tool) for r in records if r.action == "approval"]
    assert approvals == [
        ("parked", "", "write_file"),
        ("approved", "cli:tester", "write_file"),
        ("parked", "", "write_file"),
        ("declined", "cli:tester", "write_file"),
    ]
    assert any(r.action == "result" and r.outcome == "ok" for r in records)
