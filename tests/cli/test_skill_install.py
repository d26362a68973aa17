"""`bastion skill install|list`: permissions shown, granted only when accepted, and recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SKILL = """---
name: uploader
description: Upload a package.
allowed-tools: skill_run(scripts/upload.py)
metadata:
  bastion-network: upload.pypi.org
  bastion-secrets: PYPI_TOKEN
  bastion-timeout: 30
---
Upload with scripts/upload.py.
"""


def bastion(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bastion.cli", "skill", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _skill(root: Path, text: str) -> Path:
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text(text)
    (root / "scripts" / "upload.py").write_text("print('up')\n")
    return root


def test_without_accepting_the_permissions_are_shown_and_nothing_is_installed(
    tmp_path: Path,
) -> None:
    source = _skill(tmp_path / "src", SKILL)
    shown = bastion("install", str(source), "--skills-dir", str(tmp_path / "skills"))
    assert shown.returncode != 0
    for words in ("skill_run(scripts/upload.py)", "upload.pypi.org", "PYPI_TOKEN", "30 s"):
        assert words in shown.stdout
    assert "was not installed" in shown.stderr and "--accept-permissions" in shown.stderr
    assert not (tmp_path / "skills" / "uploader").exists()


def test_accepting_installs_a_copy_and_records_what_was_granted(tmp_path: Path) -> None:
    source = _skill(tmp_path / "src", SKILL)
    skills = tmp_path / "skills"
    done = bastion("install", str(source), "--skills-dir", str(skills), "--accept-permissions")
    assert done.returncode == 0, done.stderr
    installed = skills / "uploader"
    assert (installed / "scripts" / "upload.py").read_text() == "print('up')\n"
    record = json.loads((installed / "granted.json").read_text())
    assert record["granted"] == {
        "allowed_tools": ["skill_run(scripts/upload.py)"],
        "network": ["upload.pypi.org"],
        "secrets": ["PYPI_TOKEN"],
        "timeout_s": 30.0,
    }
    assert [p.name for p in skills.iterdir()] == ["uploader"]  # no staging left behind
    again = bastion("install", str(source), "--skills-dir", str(skills), "--accept-permissions")
    assert again.returncode == 0 and [p.name for p in skills.iterdir()] == ["uploader"]
    listed = bastion("list", "--skills-dir", str(skills))
    assert listed.returncode == 0 and "uploader\tUpload a package." in listed.stdout


def test_a_skill_that_declares_nothing_installs_with_nothing_granted(tmp_path: Path) -> None:
    source = _skill(tmp_path / "plain", "---\nname: plain\ndescription: d\n---\nDo it.\n")
    done = bastion("install", str(source), "--skills-dir", str(tmp_path / "skills"))
    assert done.returncode == 0, done.stderr
    assert "asks for nothing" in done.stdout and "nothing granted" in done.stdout
    record = json.loads((tmp_path / "skills" / "plain" / "granted.json").read_text())
    assert record["granted"] == {
        "allowed_tools": [], "network": [], "secrets": [], "timeout_s": None
    }  # fmt: skip


def test_a_directory_without_skill_md_is_refused_with_a_sentence(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    refused = bastion("install", str(tmp_path / "empty"), "--skills-dir", str(tmp_path / "s"))
    assert refused.returncode != 0 and "has no SKILL.md" in refused.stderr
