"""Attacks on `skill_find`: a skill dir or SKILL.md linked out of the skills dir, a name or
query that climbs, a SKILL.md that is a pipe, a skills dir that is the host's: each is
answered with why, and nothing outside the skills dir is read or changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bastion.proto import subjects
from bastion.proto.sandbox import FindSkills, SkillListing
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from tests.helpers.sandbox import CANARY, SESSION, Host

STATE_SECRET = "state secret"


async def _find(client: Client, skills: Path | str, query: str | None = None) -> SkillListing:
    message = FindSkills(session_id=SESSION, skills_dir=str(skills), query=query)
    listing: SkillListing = await request(
        client, subjects.SANDBOX_SKILL_FIND, message, SkillListing, timeout_s=10
    )
    return listing


def _everything(listing: SkillListing) -> str:
    """Every string the listing carries, to look for what should never be in it."""
    return repr(listing)


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A skills dir made before the host is looked at: one honest skill, and links out to
    the host's canary's directory and to the state dir."""
    skills = tmp_path / "skills"
    (skills / "honest").mkdir(parents=True)
    (skills / "honest" / "SKILL.md").write_text("---\ndescription: Honest.\n---\nhost words\n")
    (skills / "climber").mkdir()
    (skills / "climber" / "SKILL.md").write_text("---\nname: ../../state\n---\nclimb\n")
    (skills / "climber" / "scripts").symlink_to(tmp_path / "state")
    (skills / "whole-host").symlink_to(tmp_path)
    (skills / "state").symlink_to(tmp_path / "state")
    (skills / "canary").mkdir()
    (skills / "canary" / "SKILL.md").symlink_to(tmp_path / "outside.txt")
    (skills / "pipe").mkdir()
    os.mkfifo(skills / "pipe" / "SKILL.md")
    return skills


async def test_skill_dirs_and_skill_files_linked_out_are_named_and_never_read(
    hostile: Path, sandbox: None, client: Client, host: Host
) -> None:
    listing = await _find(client, hostile)
    by_name = {e.name: e for e in listing.skills}
    for name in ("whole-host", "state"):
        assert "directory is a link leading out" in by_name[name].problem
    assert "SKILL.md is a link leading out" in by_name["canary"].problem
    assert "not a regular file" in by_name["pipe"].problem  # a pipe is not waited on
    assert by_name["climber"].scripts == ()  # scripts/ linked to the state dir: not walked
    assert by_name["honest"].description == "Honest." and not by_name["honest"].problem
    seen = _everything(listing)
    assert CANARY.strip() not in seen and STATE_SECRET not in seen
    assert "sessions.key" not in seen and "outside.txt" not in seen


async def test_a_query_that_climbs_is_only_words_and_finds_nothing_outside(
    hostile: Path, sandbox: None, client: Client, host: Host
) -> None:
    for query in ("../../outside.txt", "/etc/passwd", "state secret", "the host's own words"):
        seen = _everything(await _find(client, hostile, query))
        assert CANARY.strip() not in seen and STATE_SECRET not in seen
    climbing = await _find(client, hostile, "../state")
    names = [e.name for e in climbing.skills]
    assert "climber" in names  # its front matter's name is words, never a path
    assert all("/" not in n for n in names)
    honest = await _find(client, hostile, "own words")
    assert [e.name for e in honest.skills] == ["honest"]  # not the host's canary


@pytest.mark.parametrize("given", ["/", "state", "relative/skills"])
async def test_a_skills_dir_that_holds_the_state_dir_or_is_not_absolute_is_refused(
    given: str, sandbox: None, client: Client, host: Host
) -> None:
    skills_dir = str(host.state_dir) if given == "state" else given
    with pytest.raises(RemoteError) as refused:
        await _find(client, skills_dir)
    assert refused.value.to_reply().code == "invalid_input"
