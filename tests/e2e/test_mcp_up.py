"""The reference's MCP transcripts with the scripted agent against `bastion up`: the notes
server added and pinned, its tools called as `notes_<tool>`, then changed and withheld
until `bastion mcp review notes --accept`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.mcp_upstream import PYTHON_DIRS, sandboxed_python
from tests.helpers.owners import owned
from tests.helpers.running_up import BASTION, REPO, Up, bastion

pytestmark = pytest.mark.e2e

NOTES = REPO / "examples" / "mcp-notes"


def add_notes(up: Up, directory: Path) -> list[str]:
    added = subprocess.run(
        [*BASTION, "mcp", "add", "notes", "--dir", str(directory),
         *(flag for path in PYTHON_DIRS for flag in ("--sandbox-read", path)),
         "--sandbox-read", str(NOTES), "--state-dir", str(up.state_dir),
         "--", *sandboxed_python(NOTES / "notes_server.py")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    return added.stdout.splitlines()


def notes_run(up: Up, status: int = 0) -> list[str]:
    """The example's transcript; `status` 1 when a step is expected to end in an error."""
    run = bastion(
        "agent", "run", "--script", str(NOTES / "notes.json"), "--mcp", "notes",
        "--autonomy", "L3", state_dir=up.state_dir,
    )  # fmt: skip
    assert run.returncode == status, run.stdout + run.stderr
    return run.stdout.splitlines()


def test_a_server_is_added_reviewed_and_its_tools_called_then_changes_wait_for_review(
    up: Up, tmp_path: Path
) -> None:
    notes = owned(tmp_path / "notes")
    added = add_notes(up, notes)
    assert added[0].startswith("MCP server notes (") and added[0].endswith(": reviewed tools")
    assert "list_notes (read): List the notes kept, by name." in added
    assert any(line.startswith("add_note (write") for line in added)
    assert added[-1] == "Give it to a session with --mcp notes."

    listed = bastion("mcp", "list", state_dir=up.state_dir)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].startswith("notes: ")
    assert "  add_note (write)" in listed.stdout

    first = notes_run(up)
    assert (
        first[1]
        == '→ notes_add_note {"name":"release","text":"Ship the shell and MCP tools on Friday."}'
    )
    assert "← Ship the shell and MCP tools on Friday." in first
    assert first[-1].endswith(": done")

    (notes / "revision").write_text("changed")
    second = notes_run(up, status=1)  # the changed tool is withheld: unknown_tool
    assert any("export_notes is new" in line for line in second[:4]), second
    assert any("add_note changed" in line for line in second[:4]), second
    assert any(
        line.startswith("← error (unknown_tool)") and "notes_add_note" in line for line in second
    ), second

    reviewed = bastion("mcp", "review", "notes", state_dir=up.state_dir)
    assert reviewed.returncode == 0, reviewed.stderr
    assert any(
        line.endswith("[new]") and line.startswith("export_notes")
        for line in reviewed.stdout.splitlines()
    )
    assert any(
        line.endswith("[changed]") and line.startswith("add_note")
        for line in reviewed.stdout.splitlines()
    )
    assert reviewed.stdout.splitlines()[-1] == "Add --accept to pin the tools as listed."

    accepted = bastion("mcp", "review", "notes", "--accept", state_dir=up.state_dir)
    assert accepted.stdout.splitlines()[-1] == "Pinned as listed."
    third = notes_run(up)
    assert not any("is not offered" in line or "not reviewed" in line for line in third)
    assert third[-1].endswith(": done")


def test_a_servers_resources_and_prompts_are_listed_and_read_noun_then_verb(
    up: Up, tmp_path: Path
) -> None:
    notes = owned(tmp_path / "notes")
    add_notes(up, notes)
    assert notes_run(up)[-1].endswith(": done")  # keeps the note `release`

    listed = bastion("mcp", "resources", "list", "notes", state_dir=up.state_dir)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("note://{name} (template) note")
    read = bastion("mcp", "resources", "read", "notes", "note://release", state_dir=up.state_dir)
    assert read.returncode == 0, read.stderr
    assert "Ship the shell and MCP tools on Friday." in read.stdout
    prompts = bastion("mcp", "prompts", "list", "notes", "-o", "json", state_dir=up.state_dir)
    assert prompts.returncode == 0, prompts.stderr
    assert json.loads(prompts.stdout)["text"].startswith("summarize_notes()")
    servers = json.loads(bastion("mcp", "list", "-o", "json", state_dir=up.state_dir).stdout)
    assert servers["tenant"] == "default"
    assert [s["name"] for s in servers["items"]] == ["notes"]
    old = bastion("mcp", "resources", "notes", state_dir=up.state_dir)
    assert old.returncode == 2  # the old spelling is gone: the verb comes after the noun
