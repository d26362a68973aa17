"""Where a directory given to a sandbox may not be: on Bastion's state dir, or on skills.

The sandbox service checks a session's workspace, read-only directories and skills
directory with these; the mcp service checks an upstream server's `--dir` and
`--sandbox-read` with the same sentences (docs/architecture.md §5).
"""

from __future__ import annotations

from pathlib import Path

from bastion.shared.errors import InvalidInput

__all__ = [
    "check_apart_from_state",
    "check_not_showing_state",
    "check_skills_apart",
    "overlaps",
    "shown",
]

_HOLDS = "which holds sessions and secrets"


def shown(path: str, limit: int = 200) -> str:
    """A path as a sentence may quote it: long ones shortened in the middle."""
    if len(path) <= limit:
        return path
    return f"{path[: limit // 2]}…{path[-limit // 2 :]}"


def overlaps(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one directory, or one lies inside the other."""
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def check_apart_from_state(
    what: str, given: str, resolved: Path, state_dir: Path, apart: str
) -> None:
    """Refuse `resolved` (`given`, called `what` in the sentence, e.g. "the workspace") if
    it is, lies inside or contains the state dir; `apart` ends the sentence with what to do.

    Raises:
        InvalidInput: which of the three it is, and to give a directory apart from it.
    """
    state = state_dir.resolve()
    if resolved == state:
        raise InvalidInput(f"{what} {shown(given)} is Bastion's state directory, {_HOLDS}: {apart}")
    if resolved.is_relative_to(state):
        raise InvalidInput(
            f"{what} {shown(given)} lies inside Bastion's state directory "
            f"({shown(str(state))}), {_HOLDS}: {apart}"
        )
    if state.is_relative_to(resolved):
        raise InvalidInput(
            f"{what} {shown(given)} contains Bastion's state directory "
            f"({shown(str(state))}), {_HOLDS}: {apart}"
        )


def check_not_showing_state(what: str, given: str, resolved: Path, state_dir: Path) -> None:
    """Refuse a directory to be shown read-only that would show the state dir.

    Raises:
        InvalidInput: it would show it, and what to give instead.
    """
    state = state_dir.resolve()
    if overlaps(resolved, state):
        raise InvalidInput(
            f"{what} {shown(given)} would show Bastion's state directory "
            f"({shown(str(state))}), {_HOLDS}: give a directory that neither is, contains, "
            "nor lies inside it"
        )


def check_skills_apart(skills_dir: str, what: str, other: Path, because: str) -> None:
    """Refuse a skills directory that overlaps `other` (called `what`, such as "the
    workspace"); `because` says what could go wrong ("a command could change a skill
    unchecked").

    Raises:
        InvalidInput: the overlap, and what to give instead.
    """
    if overlaps(Path(skills_dir).resolve(), other):
        raise InvalidInput(
            f"the skills directory {shown(skills_dir)} and {what} {shown(str(other))} "
            f"overlap, so {because}: give a skills directory apart from {what}"
        )
