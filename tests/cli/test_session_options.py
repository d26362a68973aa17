"""`agent run` and `token create` take the same session options, read the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from bastion.cli.main import parser
from bastion.cli.sessionopts import session_fields
from bastion.proto.session import SessionLimits


def _options(workspace: Path, skills: Path) -> list[str]:
    return [
        "--tenant", "acme", "--workspace", str(workspace), "--shell", "--autonomy", "L3",
        "--network", "declared", "--sandbox-read", "/usr/share", "--skills-dir", str(skills),
        "--sandbox-timeout", "9", "--sandbox-limit", "processes=64", "--no-ask",
        "--no-skill-approvals", "--web",
        "--mcp", "notes", "github", "--mcp", "notes", "--mcp", "jira",
    ]  # fmt: skip


def test_agent_run_and_token_create_read_the_session_options_to_the_same_fields(
    tmp_path: Path,
) -> None:
    options = _options(tmp_path, tmp_path / "skills")
    ran = parser().parse_args(["agent", "run", "--script", "s.json", *options])
    created = parser().parse_args(["token", "create", "--agent", "claude", *options])
    assert (
        session_fields(ran)
        == session_fields(created)
        == {
            "tenant": "acme",
            "autonomy": "L3",
            "workspace": str(tmp_path.resolve()),
            "shell": True,
            "sandbox": "bwrap",
            "network": "declared",
            "read_only_dirs": ("/usr/share",),
            "skills_dir": str(tmp_path / "skills"),
            "limits": SessionLimits(wall_s=9.0, processes=64),
            "skill_approvals": False,
            "ask": False,
            "web": True,
            "mcp": ("notes", "github", "jira"),
        }
    )


def test_a_workspace_that_is_not_a_directory_is_refused_with_what_to_do(tmp_path: Path) -> None:
    args = parser().parse_args(
        ["token", "create", "--agent", "claude", "--workspace", str(tmp_path / "nope")]
    )
    with pytest.raises(ValueError, match="is not a directory: create it first"):
        session_fields(args)
