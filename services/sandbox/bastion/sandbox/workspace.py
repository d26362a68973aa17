"""The check every request's workspace passes: a real directory, apart from Bastion's state."""

from __future__ import annotations

from pathlib import Path

from bastion.shared.errors import InvalidInput

__all__ = ["checked_workspace", "shown"]


def shown(path: str, limit: int = 200) -> str:
    """A path as a sentence may quote it: long ones shortened in the middle."""
    if len(path) <= limit:
        return path
    return f"{path[: limit // 2]}…{path[-limit // 2 :]}"


def checked_workspace(workspace: str, state_dir: Path) -> Path:
    """`workspace` resolved, once it is an absolute, existing directory apart from `state_dir`.

    Raises:
        InvalidInput: what is wrong with it and what to give instead.
    """
    given = Path(workspace)
    if not given.is_absolute():
        raise InvalidInput(
            f"the workspace {shown(workspace)} is not an absolute path: give its full path, "
            "starting with /"
        )
    try:
        resolved = given.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InvalidInput(
            f"the workspace {shown(workspace)} does not exist: create the directory first, "
            "or give one that exists"
        ) from None
    if not resolved.is_dir():
        raise InvalidInput(f"the workspace {shown(workspace)} is not a directory: give a directory")
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
