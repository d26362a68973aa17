"""`skill_read`: a skill's SKILL.md, read confined to the session's skills dir."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Final

from bastion.proto.sandbox import ReadSkill, SkillDocument
from bastion.sandbox.files import read_text
from bastion.sandbox.workspace import overlaps, shown
from bastion.shared.errors import InvalidInput, NotFound
from bastion.shared.skillmatter import (
    NETWORK_KEY,
    SECRETS_KEY,
    TIMEOUT_KEY,
    FrontMatter,
    front_matter,
)

__all__ = ["MAX_SKILL_BYTES", "checked_declarations", "checked_skills_dir", "read_skill"]

MAX_SKILL_BYTES: Final = 256 * 1024
"""A SKILL.md is instructions for a model; a longer one is refused, not cut."""

_HOST: Final = re.compile(
    r"^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
    r"(:[0-9]{1,5})?$",
    re.IGNORECASE,
)
_SECRET: Final = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
MAX_HOSTS: Final = 32
MAX_SECRETS: Final = 12


def checked_declarations(name: str, found: FrontMatter) -> float | None:
    """The skill's timeout in seconds, once its network, secrets and timeout are well formed.

    Raises:
        InvalidInput: which declaration is malformed and how to write it.
    """
    bad_hosts = [h for h in found.network if h != "true" and not _HOST.match(h)]
    if bad_hosts or len(found.network) > MAX_HOSTS:
        raise InvalidInput(
            f"skill {name!r} declares {NETWORK_KEY} it cannot have ({shown(' '.join(bad_hosts))}): "
            f"give at most {MAX_HOSTS} of `host`, `*.suffix` or `host:port`, or `true`"
        )
    bad_names = [n for n in found.secrets if not _SECRET.match(n)]
    if bad_names or len(found.secrets) > MAX_SECRETS:
        raise InvalidInput(
            f"skill {name!r} declares {SECRETS_KEY} it cannot have ({shown(' '.join(bad_names))}): "
            f"give at most {MAX_SECRETS} names of capitals, digits and `_`"
        )
    if not found.timeout:
        return None
    try:
        seconds = float(found.timeout)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidInput(
            f"skill {name!r} declares {TIMEOUT_KEY} {shown(found.timeout)}: give a number of "
            "seconds above 0"
        )
    return seconds


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
    if overlaps(resolved, state_dir.resolve()):
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
    found = front_matter(text, request.name)
    timeout_s = checked_declarations(request.name, found)
    return SkillDocument(
        name=found.name or request.name,
        text=text,
        description=found.description,
        allowed_tools=found.allowed_tools,
        network=found.network,
        secrets=found.secrets,
        timeout_s=timeout_s,
    )
