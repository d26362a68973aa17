"""The command hooks file, `<state dir>/hooks.json`: reading it safely, and writing it."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from bastion.shared.errors import BastionError

__all__ = [
    "EVENTS",
    "CommandHook",
    "HooksFile",
    "UnsafeHooksFile",
    "hooks_path",
    "load_hooks",
    "save_hooks",
]

CommandEvent = Literal["before-tool", "after-tool", "run-start", "run-end"]

EVENTS: tuple[CommandEvent, ...] = ("before-tool", "after-tool", "run-start", "run-end")


class CommandHook(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A command run at `event`; `tools` (patterns, `*` any characters) empty means every tool."""

    event: CommandEvent
    command: Annotated[list[str], msgspec.Meta(min_length=1)]
    tools: list[str] = msgspec.field(default_factory=list)
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 30.0


class HooksFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    hooks: list[CommandHook] = msgspec.field(default_factory=list)


class UnsafeHooksFile(BastionError):
    """The hooks file could be changed by someone else, or does not parse: nothing runs."""


def hooks_path(state_dir: Path) -> Path:
    return state_dir / "hooks.json"


def load_hooks(path: Path) -> list[CommandHook]:
    """The hooks of `path` (none if it is missing).

    Raises:
        UnsafeHooksFile: anyone but its owner may change it, its owner is not this user,
            or it is not a hooks file.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return []
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_uid != os.geteuid():
        raise UnsafeHooksFile(
            f"{path} may be changed by someone other than its owner (mode "
            f"{stat.filemode(info.st_mode)}, owner uid {info.st_uid}), so its hooks are refused "
            f"and nothing runs until it is fixed: chmod go-w {path} (and own it as the user "
            "running Bastion)"
        )
    try:
        return msgspec.json.decode(path.read_bytes(), type=HooksFile).hooks
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise UnsafeHooksFile(
            f"{path} is not a hooks file ({error}), so nothing runs until it is fixed: "
            "correct it, or remove it and add the hooks again with `bastion hooks add`"
        ) from None


def save_hooks(path: Path, hooks: list[CommandHook]) -> None:
    """Write `hooks` to `path`, readable and writable by its owner only, in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".new")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.format(msgspec.json.encode(HooksFile(hooks=hooks))) + b"\n")
    os.replace(temporary, path)
