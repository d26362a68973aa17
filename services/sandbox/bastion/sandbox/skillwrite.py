"""`skill_write`: a SKILL.md an agent writes, holding only a name, a description and
instructions: whatever front matter the instructions carry stays instructions."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Final

from bastion.proto.sandbox import WriteSkill
from bastion.proto.toolinput import WriteFileInput
from bastion.sandbox.files import read_text, write_file
from bastion.sandbox.skills import MAX_SKILL_BYTES
from bastion.shared.errors import InvalidInput, NotFound
from bastion.shared.sandboxing import HostIds
from bastion.shared.skillmatter import FrontMatter, front_matter

__all__ = ["GRANTED_FILE", "skill_text", "write_skill"]

GRANTED_FILE: Final = "granted.json"
"""What `bastion skill install` recorded as granted, beside SKILL.md."""


def _instructions(text: str) -> str:
    """`text`, a front matter block at its start indented four spaces (a code block), so
    that no reader takes it for the skill's own."""
    lines = text.strip("\n").splitlines()
    if not lines or lines[0].strip() != "---":
        return "\n".join(lines)
    end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), len(lines) - 1)
    return "\n".join([*("    " + line for line in lines[: end + 1]), *lines[end + 1 :]])


def skill_text(request: WriteSkill) -> str:
    """The SKILL.md: `name` and `description` (one line, quoted), then the instructions."""
    description = " ".join(request.description.split()).replace('"', "'")
    return (
        f'---\nname: {request.name}\ndescription: "{description}"\n---\n\n'
        f"{_instructions(request.instructions)}\n"
    )


def _declared(found: FrontMatter) -> list[str]:
    """What an earlier SKILL.md declared beyond a name and a description, in words."""
    parts: list[str] = []
    if found.allowed_tools:
        parts.append("allowed-tools " + " ".join(found.allowed_tools))
    if found.network:
        parts.append("network " + " ".join(found.network))
    if found.secrets:
        parts.append("secrets " + " ".join(found.secrets))
    if found.timeout:
        parts.append(f"timeout {found.timeout}")
    return parts


def _previous(skills_dir: Path, name: str) -> FrontMatter | None:
    """The front matter of the skill's SKILL.md before this write, if it has one."""
    try:
        return front_matter(read_text(skills_dir, f"{name}/SKILL.md", MAX_SKILL_BYTES), name)
    except NotFound:
        return None
    except InvalidInput:
        return FrontMatter()


def write_skill(skills_dir: Path, request: WriteSkill, owner: HostIds | None) -> str:
    """Write the SKILL.md atomically, confined to the skills dir; say what a rewrite dropped.

    What it writes is `owner`'s (the skills dir's owner when the service is root), never
    setuid or setgid (`files.write_file`).

    A rewritten skill loses what it declared, and the record of what was granted with it.
    """
    previous = _previous(skills_dir, request.name)
    text = skill_text(request)
    write_file(
        skills_dir,
        WriteFileInput(path=f"{request.name}/SKILL.md", content=text),
        owner,
    )
    skill_dir = (skills_dir / request.name).resolve()
    if skill_dir.is_relative_to(skills_dir):
        with contextlib.suppress(FileNotFoundError):
            (skill_dir / GRANTED_FILE).unlink()
    verb = "rewrote" if previous is not None else "wrote"
    reply = f"{verb} skill {request.name!r} ({len(text.encode())} bytes of SKILL.md)"
    dropped = _declared(previous) if previous is not None else []
    if dropped:
        reply += (
            "; what it declared is dropped, since a skill written by an agent keeps only a "
            f"name, a description and instructions: {'; '.join(dropped)}"
        )
    return reply
