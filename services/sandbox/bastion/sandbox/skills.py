"""`skill_read`: a skill's SKILL.md, read confined to the session's skills dir."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from bastion.proto.sandbox import ReadSkill, SkillDocument
from bastion.sandbox.files import read_text
from bastion.sandbox.skillmatter import front_matter
from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput, NotFound

__all__ = ["MAX_SKILL_BYTES", "checked_skills_dir", "read_skill"]

MAX_SKILL_BYTES: Final = 256 * 1024
"""A SKILL.md is instructions for a model; a longer one is refused, not cut."""


def checked_skills_dir(skills_dir: str, state_dir: Path) -> Path:
    """`skills_dir` resolved, once it is an existing directory apart from `state_dir`.

    Raises:
        InvalidInput: what is wrong with it and what to give instead.
    """
    given = Path(skills_dir)
    if not given.is_absolute():
        raise InvalidInput(f"the skills directory {shown(skills_dir)} is not an absolute path")
    resolved = given.resolve()
    if not resolved.is_dir():
        raise InvalidInput(
            f"the skills directory {shown(skills_dir)} is not a directory: give one that exists"
        )
    state = state_dir.resolve()
    if resolved == state or resolved.is_relative_to(state) or state.is_relative_to(resolved):
        raise InvalidInput(
            f"the skills directory {shown(skills_dir)} overlaps Bastion's state directory: "
            "give a skills directory apart from it"
        )
    return resolved


def read_skill(skills_dir: Path, request: ReadSkill) -> SkillDocument:
    """The skill's SKILL.md and its front matter; no link leads out of the skills dir."""
    try:
        text = read_text(skills_dir, f"{request.name}/SKILL.md", MAX_SKILL_BYTES)
    except NotFound:
        raise NotFound(
            f"there is no skill {request.name!r}: its directory in the skills dir has no "
            "SKILL.md; check the name"
        ) from None
    found = front_matter(text)
    return SkillDocument(
        name=found.name or request.name,
        text=text,
        description=found.description,
        allowed_tools=found.allowed_tools,
    )
