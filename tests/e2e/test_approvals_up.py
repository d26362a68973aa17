"""The reference's approval transcripts replayed with the scripted agent against `bastion up`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.owners import owned
from tests.helpers.running_up import REPO, WAITING, WAITS, Up, bastion, notes_run

pytestmark = pytest.mark.e2e


def test_a_skill_pre_approves_the_notes_the_readme_waits_and_a_decline_finishes_the_run(
    up: Up, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    lines = notes_run(up, workspace)
    at = lines.index("← [ran without asking: pre-approved by skill release-notes: Write(notes/*)]")
    assert lines[at + 1] == "wrote 71 bytes to notes/2.4.0.md"
    assert lines[-2] == "← waiting for a person's approval"
    waiting = WAITING.match(lines[-1])
    assert waiting and waiting["tool"] == "write_file" and "README.md" in waiting["input"]
    assert (workspace / "notes" / "2.4.0.md").exists() and not (workspace / "README.md").exists()
    sid = waiting["sid"]

    listed = bastion("approvals", "list", state_dir=up.state_dir)
    assert waiting["rid"] in listed.stdout and "pending" in listed.stdout

    answered = bastion(
        "agent", "continue", sid, "--decline", "leave the README as it is",
        state_dir=up.state_dir,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    after = answered.stdout.splitlines()
    assert re.fullmatch(
        r'→ write_file \{"content":"See notes/\.\\n","path":"README\.md"\} '
        r"\(declined by cli:\S+: leave the README as it is\)",
        after[0],
    ), after[0]
    assert after[1].startswith("← error (declined): a person (cli:")
    assert after[1].endswith("declined this call: leave the README as it is")
    assert after[2:] == [
        "agent: The notes for 2.4.0 are in notes/2.4.0.md.",
        f"session {sid}: done",
    ]
    assert not (workspace / "README.md").exists()
    assert not (up.state_dir / "runs" / f"{sid}.json").exists()


def test_without_skill_approvals_the_notes_write_waits_too(up: Up, tmp_path: Path) -> None:
    workspace = owned(tmp_path / "work")
    lines = notes_run(up, workspace, "--no-skill-approvals")
    assert lines[-2] == "← waiting for a person's approval"
    waiting = WAITING.match(lines[-1])
    assert waiting and "notes/2.4.0.md" in waiting["input"]
    assert "--no-skill-approvals" in waiting["why"]
    assert not (workspace / "notes").exists()

    approved = bastion("agent", "continue", waiting["sid"], "--approve", state_dir=up.state_dir)
    assert approved.returncode == WAITS, approved.stderr
    after = approved.stdout.splitlines()
    assert after[0].endswith(")") and "(approved by cli:" in after[0]
    assert after[1] == "← wrote 71 bytes to notes/2.4.0.md"
    assert after[-2] == "← waiting for a person's approval"  # the README still asks


def test_a_tainted_session_asks_again_where_a_persons_rule_would_have_let_it_run(
    up: Up, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    run = bastion(
        "agent", "run", "--script", str(REPO / "examples" / "taint.json"),
        "--workspace", str(workspace), "--shell", "--network", "host", "--autonomy", "L4",
        state_dir=up.state_dir,
    )  # fmt: skip
    assert run.returncode == WAITS, run.stderr
    waiting = WAITING.match(run.stdout.splitlines()[-1])
    assert (
        waiting and "reaches outside, which L4 runs only once a person approves" in waiting["why"]
    )
    sid = waiting["sid"]

    first = bastion(
        "agent", "continue", sid, "--approve", "--always", "shell(echo:*)", state_dir=up.state_dir
    )
    assert first.returncode == WAITS, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].endswith("; from now on: shell(echo:*))")
    assert "fetched from outside" in lines
    assert lines[-2] == (
        "← waiting for a person's approval (asked because the session is tainted: it read "
        "content from outside, so its pre-approvals are suspended)"
    )
    again = WAITING.match(lines[-1])
    assert again and "pre-approvals are suspended" in again["why"]

    second = bastion("agent", "continue", sid, "--approve", state_dir=up.state_dir)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1] == f"session {sid}: done"
    assert "and once more" in second.stdout

    nothing = bastion("agent", "continue", sid, "--approve", state_dir=up.state_dir)
    assert nothing.returncode == 1 and "waits for no answer" in nothing.stderr


def test_approvals_approve_and_decline_answer_a_call_by_its_request_id(
    up: Up, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    first = WAITING.match(notes_run(up, workspace, "--no-skill-approvals")[-1])
    assert first and "notes/2.4.0.md" in first["input"]
    sid = first["sid"]
    listed = bastion("approvals", "list", "-o", "json", state_dir=up.state_dir)
    assert [a["request_id"] for a in json.loads(listed.stdout)["items"]] == [first["rid"]]

    approved = bastion("approvals", "approve", first["rid"], state_dir=up.state_dir)
    assert approved.returncode == 0, approved.stderr
    lines = approved.stdout.splitlines()
    assert "(approved by cli:" in lines[0] and lines[1] == "← wrote 71 bytes to notes/2.4.0.md"
    assert lines[2].startswith(f"session {sid} keeps the rest of its script")
    again = bastion("approvals", "approve", first["rid"], state_dir=up.state_dir)
    assert again.returncode == 1 and "no call waits under request" in again.stderr

    carried = bastion("agent", "continue", sid, "--approve", state_dir=up.state_dir)
    assert carried.returncode == WAITS, carried.stdout + carried.stderr
    assert "already answered by cli:" in carried.stdout
    second = WAITING.match(carried.stdout.splitlines()[-1])
    assert second and "README.md" in second["input"]

    declined = bastion(
        "approvals", "decline", second["rid"], "leave the README", state_dir=up.state_dir
    )
    assert declined.returncode == 0, declined.stderr
    assert "(declined by cli:" in declined.stdout and "leave the README" in declined.stdout
    done = bastion("agent", "continue", sid, "--approve", state_dir=up.state_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"session {sid}: done"
    assert not (workspace / "README.md").exists()

    not_an_id = bastion("approvals", "decline", "README", "no", state_dir=up.state_dir)
    assert not_an_id.returncode == 2 and "is not a request id" in not_an_id.stderr
