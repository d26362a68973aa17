"""A SKILL.md: its front matter read without YAML, its file confined to the skills dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from bastion.proto.sandbox import ReadSkill
from bastion.sandbox.skills import checked_skills_dir, read_skill
from bastion.shared.errors import InvalidInput, NotFound
from bastion.shared.skillmatter import front_matter, split_rules

SID = "0123456789abcdef"


@pytest.mark.parametrize(
    ("written", "rules"),
    [
        ("Write(notes/*)", ("Write(notes/*)",)),
        ("Bash(git log:*) Read", ("Bash(git log:*)", "Read")),
        ("Write(notes/*), Bash(git log:*),Read", ("Write(notes/*)", "Bash(git log:*)", "Read")),
        ("  ", ()),
    ],
)
def test_allowed_tools_split_on_spaces_and_commas_but_not_inside_parentheses(
    written: str, rules: tuple[str, ...]
) -> None:
    assert split_rules(written) == rules


def test_front_matter_reads_name_description_and_allowed_tools_in_both_forms() -> None:
    inline = front_matter(
        "---\nname: release-notes\ndescription: 'Notes: what changed.'\n"
        "allowed-tools: Write(notes/*) Bash(git log:*)\nmetadata:\n  x: y\n---\nbody\n"
    )
    listed = front_matter("---\nname: n\nallowed-tools:\n  - Write(notes/*)\n  - Read\n---\n")
    assert inline.name == "release-notes" and inline.description == "Notes: what changed."
    assert inline.allowed_tools == ("Write(notes/*)", "Bash(git log:*)")
    assert listed.allowed_tools == ("Write(notes/*)", "Read")


@pytest.mark.parametrize("text", ["no front matter\n", "---\nname: x\n", ""])
def test_a_file_without_a_closed_front_matter_declares_nothing(text: str) -> None:
    assert front_matter(text).allowed_tools == () and front_matter(text).name == ""


def test_a_skill_is_read_from_its_directory_and_a_link_out_of_the_skills_dir_is_refused(
    tmp_path: Path,
) -> None:
    skills = tmp_path / "skills"
    (skills / "good").mkdir(parents=True)
    (skills / "good" / "SKILL.md").write_text("---\nallowed-tools: Read\n---\nhi\n")
    (tmp_path / "outside.md").write_text("---\nallowed-tools: Bash\n---\n")
    (skills / "sneaky").mkdir()
    (skills / "sneaky" / "SKILL.md").symlink_to(tmp_path / "outside.md")
    (skills / "jump").symlink_to(tmp_path)
    good = read_skill(skills, ReadSkill(session_id=SID, skills_dir=str(skills), name="good"))
    assert good.name == "good" and good.allowed_tools == ("Read",)
    for name in ("sneaky", "jump"):
        with pytest.raises(InvalidInput):
            read_skill(skills, ReadSkill(session_id=SID, skills_dir=str(skills), name=name))
    with pytest.raises(NotFound, match="no skill 'missing'"):
        read_skill(skills, ReadSkill(session_id=SID, skills_dir=str(skills), name="missing"))


def test_a_skills_dir_inside_the_state_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state" / "skills").mkdir(parents=True)
    with pytest.raises(InvalidInput, match="state directory"):
        checked_skills_dir(str(tmp_path / "state" / "skills"), tmp_path / "state")
