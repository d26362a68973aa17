"""`skill_run`'s part in the sandbox service: the skill's own script and its interpreter."""

from __future__ import annotations

import os
import shlex
from pathlib import Path, PurePosixPath
from typing import Final

from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput, NotFound
from bastion.shared.sandboxing.spec import SKILL_MOUNT

__all__ = ["INTERPRETERS", "ScriptRun", "interpreter", "script_command", "skill_script"]

INTERPRETERS: Final = {
    ".py": ("python3",),
    ".sh": ("sh",),
    ".js": ("node",),
    ".rb": ("ruby",),
    ".pl": ("perl",),
}
"""The interpreter of a script without a `#!` line, by its extension."""

_SHEBANG_BYTES: Final = 256


class ScriptRun:
    """A checked script: the skill's resolved directory and the script's path inside it."""

    def __init__(self, skill_dir: Path, relative: PurePosixPath) -> None:
        self.skill_dir = skill_dir
        self.relative = relative


def skill_script(skills_dir: Path, name: str, script: str) -> ScriptRun:
    """`script` of skill `name`, once it is a file of the skill's own: no `..`, no link out.

    Raises:
        InvalidInput: the path climbs out, is absolute, or a link leads out of the skill.
        NotFound: the skill or the script does not exist.
    """
    given = PurePosixPath(script.removeprefix(f"{SKILL_MOUNT}/"))
    if given.is_absolute() or ".." in given.parts or not given.parts:
        raise InvalidInput(
            f"the script {shown(script)} is not a path inside the skill: give one relative to "
            "the skill's directory, without `..` (`scripts/check.sh`)"
        )
    skill_link = skills_dir / name
    skill_dir = skill_link.resolve()
    if not skill_dir.is_relative_to(skills_dir) or skill_dir == skills_dir:
        raise InvalidInput(f"the skill {name!r} leads out of the skills dir: it is not run")
    if not skill_dir.is_dir():
        raise NotFound(f"there is no skill {name!r} in the skills dir: check the name")
    resolved = (skill_dir / given).resolve()
    if not resolved.is_relative_to(skill_dir):
        raise InvalidInput(
            f"the script {shown(script)} is a link that leads out of skill {name!r}: only the "
            "skill's own files run"
        )
    if not resolved.is_file():
        raise NotFound(f"skill {name!r} has no script {shown(script)}: check its SKILL.md")
    return ScriptRun(skill_dir, PurePosixPath(resolved.relative_to(skill_dir).as_posix()))


def interpreter(path: Path) -> tuple[str, ...]:
    """The program a script runs with: its `#!` line (one argument, as Linux reads it), else
    its extension's.

    Raises:
        InvalidInput: the script has neither a `#!` line nor a known extension.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as stream:
        head = stream.read(_SHEBANG_BYTES)
    if head.startswith(b"#!"):
        line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        program, _, argument = line.partition(" ")
        if program:
            return (program, argument.strip()) if argument.strip() else (program,)
    found = INTERPRETERS.get(path.suffix.lower())
    if found is None:
        known = ", ".join(INTERPRETERS)
        raise InvalidInput(
            f"the script {shown(path.name)} has no `#!` line and no extension Bastion knows "
            f"({known}): give it a `#!` line"
        )
    return found


def script_command(run: ScriptRun, args: tuple[str, ...]) -> str:
    """The command line for `/bin/sh -c`: the interpreter, the script at `/skill`, and the
    arguments, each quoted so that no argument is read by the shell."""
    inside = f"{SKILL_MOUNT}/{run.relative}"
    program = interpreter(run.skill_dir / run.relative)
    return shlex.join([*program, inside, *args])
