"""`skill_find`: the skills dir's skills and what each declares, or those matching words;
a hostile skill (a link out, a huge SKILL.md, misshapen front matter) is answered with why."""

from __future__ import annotations

from pathlib import Path

import pytest

from bastion.orchestrator.registry import REGISTRY
from bastion.orchestrator.skillfind import render_listing
from bastion.proto.sandbox import FindSkills, SkillListing
from bastion.proto.tools import ToolOutput
from bastion.sandbox.skillfind import (
    MAX_FOUND,
    MAX_LISTED,
    MAX_SCRIPTS,
    MAX_SKILLS_READ,
    find_skills,
)
from bastion.sandbox.skills import MAX_SKILL_BYTES
from bastion.shared.bus import Client
from bastion.shared.errors import InvalidInput
from tests.helpers.bus import Plane
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session

SID = "0123456789abcdef"

PYPI = """---
name: pypi-version
description: The latest version of a package on PyPI.
allowed-tools: Read
metadata:
  bastion-network: pypi.org
  bastion-secrets: PYPI_TOKEN
  bastion-timeout: 30
---
Run scripts/latest.py with the package's name; it prints the version.
"""
NOTES = """---
name: release-notes
description: Write the release notes of a version.
allowed-tools: Write(notes/*)
---
Gather the merged changes and write notes/<version>.md.
Mention the upgrade steps, if any.
"""


def _skill(skills: Path, name: str, text: str, scripts: dict[str, str] | None = None) -> Path:
    directory = skills / name
    directory.mkdir(parents=True)
    (directory / "SKILL.md").write_text(text)
    for path, body in (scripts or {}).items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(body)
    return directory


def _find(skills: Path, query: str | None = None) -> SkillListing:
    return find_skills(skills, FindSkills(session_id=SID, skills_dir=str(skills), query=query))


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    path = tmp_path / "skills"
    _skill(path, "pypi-version", PYPI, {"scripts/latest.py": "print()\n"})
    _skill(path, "release-notes", NOTES)
    return path


def test_a_listing_names_each_skill_with_its_description_and_declarations(skills: Path) -> None:
    (skills / "notes.txt").write_text("not a skill\n")
    (skills / "empty").mkdir()  # no SKILL.md: not a skill
    (skills / ".hidden").mkdir()
    listing = _find(skills)
    assert [e.name for e in listing.skills] == ["pypi-version", "release-notes"]
    assert listing.total == 2 and not listing.unread
    pypi, notes = listing.skills
    assert pypi.description == "The latest version of a package on PyPI."
    assert pypi.allowed_tools == ("Read",) and pypi.network == ("pypi.org",)
    assert pypi.secrets == ("PYPI_TOKEN",) and pypi.timeout_s == 30.0
    assert pypi.scripts == ("scripts/latest.py",) and not pypi.problem
    assert notes.allowed_tools == ("Write(notes/*)",) and notes.scripts == ()
    text = render_listing(listing, None)
    assert text.startswith("2 skills in the skills dir:\n- pypi-version: The latest version")
    assert "network: pypi.org; secrets: PYPI_TOKEN; timeout: 30 s; scripts: scripts/latest.py" in (
        text
    )
    assert "- release-notes: Write the release notes" in text


def test_a_search_ranks_by_words_held_then_where_case_insensitively(skills: Path) -> None:
    _skill(skills, "changelog", "---\ndescription: Keeps a CHANGELOG.\n---\nList each release.\n")
    found = _find(skills, "RELEASE Notes")
    assert [e.name for e in found.skills] == ["release-notes", "changelog"]
    assert found.total == 2
    assert found.skills[1].excerpt == "List each release."
    by_body = _find(skills, "upgrade")
    assert [e.name for e in by_body.skills] == ["release-notes"]
    assert by_body.skills[0].excerpt == "Mention the upgrade steps, if any."
    prefix = _find(skills, "vers")  # a word matches the words it begins
    assert {e.name for e in prefix.skills} == {"pypi-version", "release-notes"}
    assert prefix.skills[0].name == "pypi-version"  # in its name, above a description
    none = _find(skills, "kubernetes")
    assert none.skills == () and none.total == 0
    assert "No skill matches 'kubernetes'" in render_listing(none, "kubernetes")


def test_a_query_without_words_is_refused_with_what_to_give(skills: Path) -> None:
    with pytest.raises(InvalidInput, match="holds no words"):
        _find(skills, "../ /// --")


def test_answers_are_bounded_and_say_how_many_there_were(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    for n in range(MAX_LISTED + 5):
        _skill(skills, f"s{n:03}", f"---\ndescription: tool {n}\n---\nshared word\n")
    many = {f"scripts/{n:02}.sh": "echo\n" for n in range(MAX_SCRIPTS + 3)}
    _skill(skills, "s000-scripts", "---\ndescription: x\n---\n", many)
    listing = _find(skills)
    assert len(listing.skills) == MAX_LISTED and listing.total == MAX_LISTED + 6
    assert f"(the first {MAX_LISTED} shown)" in render_listing(listing, None)
    scripted = next(e for e in listing.skills if e.name == "s000-scripts")
    assert len(scripted.scripts) == MAX_SCRIPTS and scripted.more_scripts
    found = _find(skills, "shared")
    assert len(found.skills) == MAX_FOUND and found.total == MAX_LISTED + 5
    assert "give more words to narrow it" in render_listing(found, "shared")


def test_a_skills_dir_with_more_skills_than_are_read_says_so(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    for n in range(MAX_SKILLS_READ + 1):
        _skill(skills, f"s{n:03}", "---\ndescription: d\n---\n")
    listing = _find(skills)
    assert listing.unread and listing.total == MAX_SKILLS_READ
    assert listing.skills[0].name == "s000"  # the first by name
    assert "only the first by name were" in render_listing(listing, None)


def test_a_hostile_skills_dir_gets_a_clear_answer_for_each_and_nothing_outside_is_read(
    skills: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    _skill(outside, "loot", "---\ndescription: OUTSIDE-SECRET\n---\nOUTSIDE-SECRET\n")
    (outside / "loot" / "scripts").mkdir()
    (outside / "loot" / "scripts" / "steal.sh").write_text("echo\n")
    (skills / "away").symlink_to(outside / "loot")
    (skills / "here").symlink_to(skills)
    _skill(skills, "linked-md", "x").joinpath("SKILL.md").unlink()
    (skills / "linked-md" / "SKILL.md").symlink_to(outside / "loot" / "SKILL.md")
    _skill(skills, "huge", "---\ndescription: big\n---\n" + "a" * MAX_SKILL_BYTES)
    _skill(skills, "bad-yaml", "---\ndescription: [unclosed\n---\nbody\n")
    _skill(skills, "aliased", "---\nname: &a x\ndescription: *a\n---\n")
    _skill(skills, "bad-timeout", "---\nmetadata:\n  bastion-timeout: soon\n---\n")
    _skill(skills, "link-scripts", "---\ndescription: s\n---\n")
    (skills / "link-scripts" / "scripts").symlink_to(outside / "loot" / "scripts")
    _skill(skills, "inner-link", "---\ndescription: s\n---\n", {"scripts/ok.sh": "echo\n"})
    (skills / "inner-link" / "scripts" / "out.sh").symlink_to(outside / "loot" / "SKILL.md")
    (skills / "loop").symlink_to(skills / "loop")
    (skills / "absolute").symlink_to(skills / "pypi-version")
    (skills / "relative").symlink_to("pypi-version")
    _skill(skills, "md-loop", "x").joinpath("SKILL.md").unlink()
    (skills / "md-loop" / "SKILL.md").symlink_to(skills / "md-loop" / "SKILL.md")
    listing = _find(skills)
    by_name = {e.name: e for e in listing.skills}
    assert "a link to nothing" in by_name["loop"].problem
    assert "absolute path" in by_name["absolute"].problem
    assert by_name["relative"].scripts == ("scripts/latest.py",)
    assert "SKILL.md is a link to nothing" in by_name["md-loop"].problem
    assert "link leading out of the skills dir" in by_name["away"].problem
    assert "link leading out of the skills dir" in by_name["here"].problem
    assert "SKILL.md is a link leading out" in by_name["linked-md"].problem
    assert f"larger than {MAX_SKILL_BYTES} bytes" in by_name["huge"].problem
    assert "not valid YAML" in by_name["bad-yaml"].problem
    assert "anchor or alias" in by_name["aliased"].problem
    assert "bastion-timeout" in by_name["bad-timeout"].problem
    assert by_name["link-scripts"].scripts == () and not by_name["link-scripts"].problem
    assert by_name["inner-link"].scripts == ("scripts/ok.sh",)
    assert by_name["pypi-version"].scripts == ("scripts/latest.py",)  # the rest still listed
    text = render_listing(listing, None)
    assert "OUTSIDE-SECRET" not in text and "steal.sh" not in text
    assert "- huge: cannot be read:" in text
    assert _find(skills, "OUTSIDE-SECRET").skills == ()


def test_skill_find_is_a_read_offered_only_with_a_skills_dir_and_not_journaled() -> None:
    definition = REGISTRY["skill_find"]
    assert definition.effect == "read" and definition.needs_skills
    assert not definition.journaled and definition.route.service == "sandbox"


async def test_skill_find_through_the_plane_lists_and_searches_the_sessions_skills(
    client: Client, plane_of: Plane, tmp_path: Path, skills: Path
) -> None:
    workspace = owned(tmp_path / "work")
    async with plane_of():
        plain = await open_session(client, workspace=str(workspace))
        info = await open_session(client, workspace=str(workspace), skills_dir=str(skills))
        listed = await call(client, info.session_id, "skill_find")
        found = await call(client, info.session_id, "skill_find", query="PyPI")
        again = await call(client, info.session_id, "skill_find", query="PyPI")
        empty = await call(client, info.session_id, "skill_find", query="..")
    assert "skill_find" not in {t.name for t in plain.tools}
    assert "skill_find" in {t.name for t in info.tools}
    assert isinstance(listed, ToolOutput) and listed.effect == "read", listed
    assert listed.text.startswith("2 skills in the skills dir:")
    assert "secrets: PYPI_TOKEN" in listed.text
    assert isinstance(found, ToolOutput) and "1 skill matches 'PyPI', best first:" in found.text
    assert "- pypi-version:" in found.text and "release-notes" not in found.text
    assert isinstance(again, ToolOutput) and not again.text.startswith("[answered from")
    assert not isinstance(empty, ToolOutput) and empty.code == "invalid_input"
    assert "holds no words" in empty.message
