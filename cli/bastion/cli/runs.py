"""The rest of a script whose session waits for a person, kept in `<state dir>/runs/`.

`bastion agent continue` reads it back to carry on where `bastion agent run` stopped.
Written atomically (a temporary file renamed over the old one), readable by its owner only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import msgspec

from bastion.cli.script import Step

__all__ = ["KeptRun", "forget_run", "keep_run", "kept_run"]


class KeptRun(msgspec.Struct, frozen=True, kw_only=True):
    """A script's steps after the one that waits, and the request it waits on."""

    session_id: str
    request_id: str
    steps: tuple[Step, ...] = ()


def _path(state_dir: Path, session_id: str) -> Path:
    return state_dir / "runs" / f"{session_id}.json"


def keep_run(state_dir: Path, kept: KeptRun) -> None:
    path = _path(state_dir, kept.session_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(msgspec.json.encode(kept))
            stream.flush()
            os.fsync(stream.fileno())
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


def kept_run(state_dir: Path, session_id: str) -> KeptRun | None:
    """The kept rest of the session's script, or None if none was kept."""
    try:
        return msgspec.json.decode(_path(state_dir, session_id).read_bytes(), type=KeptRun)
    except FileNotFoundError:
        return None


def forget_run(state_dir: Path, session_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        _path(state_dir, session_id).unlink()
