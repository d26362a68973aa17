"""README.md is the front door: at most 200 lines, the install line and the two commands as
a fresh clone runs them, a walkthrough whose workspace a root `bastion up` can use, and a
map that lists every page of docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
INSTALL = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -U pip && "
    "pip install -e . --group dev"
)


def _shell_lines() -> list[str]:
    """The command lines of the README's `sh` blocks, comments cut off."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    return [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]


def test_the_readme_is_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_the_readme_gives_the_install_line_and_the_two_commands() -> None:
    lines = _shell_lines()
    assert INSTALL in lines
    assert "bastion up" in lines and "pytest" in lines


def test_the_walkthroughs_workspace_is_given_away_from_root() -> None:
    lines = _shell_lines()
    made = lines.index("mkdir -p work")
    assert lines[made + 1] == "chown 1000:1000 work"
    assert "--workspace work" in lines[made + 2]


def test_the_readmes_map_lists_every_page_of_docs() -> None:
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", README))
    pages = {page.name for page in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), f"pages missing from README.md's map: {pages - linked}"
