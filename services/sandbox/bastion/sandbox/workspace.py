"""The checks a request's directories pass (workspace, read-only dirs, skills) before use."""

from __future__ import annotations

from pathlib import Path

from bastion.shared.errors import InvalidInput

__all__ = [
    "check_skills_dir",
    "checked_read_only_dirs",
    "checked_workspace",
    "overlaps",
    "shown",
]


def shown(path: str, limit: int = 200) -> str:
    """A path as a sentence may quote it: long ones shortened in the middle."""
    if len(path) <= limit:
        return path
    return f"{path[: limit // 2]}…{path[-limit // 2 :]}"


def _existing_dir(what: str, given: str, if_missing: str) -> Path:
    """`given` resolved, once it is an absolute path to an existing directory; `what` names
    it in the sentences, `if_missing` says what to do when it does not exist.

    Raises:
        InvalidInput: what is wrong with it and what to give instead.
    """
    path = Path(given)
    if not path.is_absolute():
        raise InvalidInput(
            f"{what} {shown(given)} is not an absolute path: give its full path, starting with /"
        )
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InvalidInput(f"{what} {shown(given)} does not exist: {if_missing}") from None
    if not resolved.is_dir():
        raise InvalidInput(f"{what} {shown(given)} is not a directory: give a directory")
    return resolved


def checked_workspace(workspace: str, state_dir: Path) -> Path:
    """`workspace` resolved, once it is an absolute, existing directory apart from `state_dir`.

    Raises:
        InvalidInput: what is wrong with it and what to give instead.
    """
    resolved = _existing_dir(
        "the workspace", workspace, "create the directory first, or give one that exists"
    )
    state = state_dir.resolve()
    apart = "give a workspace apart from it"
    if resolved == state:
        raise InvalidInput(
            f"the workspace {shown(workspace)} is Bastion's state directory, which holds "
            f"sessions and secrets: {apart}"
        )
    if resolved.is_relative_to(state):
        raise InvalidInput(
            f"the workspace {shown(workspace)} lies inside Bastion's state directory "
            f"({shown(str(state))}), which holds sessions and secrets: {apart}"
        )
    if state.is_relative_to(resolved):
        raise InvalidInput(
            f"the workspace {shown(workspace)} contains Bastion's state directory "
            f"({shown(str(state))}), which holds sessions and secrets: {apart}"
        )
    return resolved


_RESERVED: tuple[str, ...] = ("/workspace", "/proc", "/dev")
"""Paths inside the sandbox that an extra read-only directory may not be mounted over."""


def overlaps(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one directory, or one lies inside the other."""
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def checked_read_only_dirs(dirs: tuple[str, ...], state_dir: Path) -> tuple[Path, ...]:
    """Each extra read-only directory resolved, once none of them shows the state dir.

    Raises:
        InvalidInput: which directory is wrong, why, and what to give instead.
    """
    state = state_dir.resolve()
    checked: list[Path] = []
    for given in dirs:
        resolved = _existing_dir("the read-only directory", given, "give one that exists")
        if overlaps(resolved, state):
            raise InvalidInput(
                f"the read-only directory {shown(given)} would show Bastion's state directory "
                f"({shown(str(state))}), which holds sessions and secrets: give a directory "
                "that neither is, contains, nor lies inside it"
            )
        if resolved == Path("/") or any(
            resolved.is_relative_to(reserved) for reserved in _RESERVED
        ):
            raise InvalidInput(
                f"the read-only directory {shown(given)} would cover the sandbox's own "
                "/workspace, /proc or /dev: give a directory elsewhere"
            )
        checked.append(resolved)
    return tuple(checked)


def check_skills_dir(skills_dir: str, workspace: Path) -> None:
    """Refuse a skills directory that overlaps the workspace (a command could rewrite a
    skill, or grant itself what a skill declares).

    Raises:
        InvalidInput: the overlap, and what to give instead.
    """
    resolved = Path(skills_dir).resolve()
    if overlaps(resolved, workspace):
        raise InvalidInput(
            f"the skills directory {shown(skills_dir)} and the workspace {shown(str(workspace))} "
            "overlap, so a command could change a skill unchecked: give a skills directory "
            "apart from the workspace"
        )
