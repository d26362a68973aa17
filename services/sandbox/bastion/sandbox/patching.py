"""`apply_patch`: every file of a patch changes, or none does.

Three steps. First every change is checked against the files as they are (each file read
confined to the workspace, each hunk fitted) without touching anything; a patch that does
not fit stops here, naming the file and the hunk. Then each new text is written to a
temporary file beside the file it replaces. Only then are the temporary files renamed
over their files and the deleted files unlinked; if writing a temporary file fails, the
temporary files are removed and no file has changed. What it writes is the session's host
user's, never setuid or setgid (as `files.write_file`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from bastion.proto.toolinput import ApplyPatchInput
from bastion.sandbox.files import _locate, _parts, give, written_mode
from bastion.sandbox.patchfit import added_text, fit_hunks
from bastion.sandbox.patchparse import FileChange, parse_patch
from bastion.sandbox.textfile import read_text, short, with_newlines
from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput, NotFound
from bastion.shared.redaction import Redactor
from bastion.shared.sandboxing import HostIds

__all__ = ["apply_patch"]


@dataclass
class _Planned:
    """One file's new text (None when it is deleted), where it goes, and what to say."""

    change: FileChange
    target: str
    data: bytes | None
    mode: int
    said: str
    parent: int = -1
    name: str = ""
    temporary: str = ""
    source_parent: int = -1
    source_name: str = ""


def _checked_path(path: str) -> str:
    if not path.strip():
        raise InvalidInput("the patch names a file with an empty path: give each file's path")
    if ".." in _parts(path):
        raise InvalidInput(
            f"the patch's path {shown(path)} uses `..`: give each path from the workspace's "
            "root, without `..`"
        )
    return path


def _exists(workspace: Path, path: str) -> bool:
    try:
        parent, name = _locate(workspace, path, make_dirs=False)
    except NotFound:
        return False
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    finally:
        os.close(parent)
    return True


def _plan(workspace: Path, change: FileChange, redactor: Redactor | None) -> _Planned:
    """Check one change against the workspace; nothing is written (a miss quotes the
    file's lines cut of `redactor`'s values)."""
    path = _checked_path(change.path)
    if change.action == "add":
        if _exists(workspace, path):
            raise InvalidInput(
                f"the patch adds {shown(path)}, which already exists: update it instead"
            )
        return _Planned(change, path, added_text(change.hunks).encode(), 0o644, f"added {path}")
    current = read_text(workspace, path)
    if change.action == "delete":
        return _Planned(change, path, None, current.mode, f"deleted {path}")
    text = with_newlines(fit_hunks(path, current.text, change.hunks, redactor), current.newline)
    if change.move_to is None:
        return _Planned(change, path, text.encode(), current.mode, f"updated {path}")
    target = _checked_path(change.move_to)
    if _exists(workspace, target):
        raise InvalidInput(
            f"the patch moves {shown(path)} to {shown(target)}, which already exists: move it "
            "elsewhere or delete that file in the patch first"
        )
    return _Planned(change, target, text.encode(), current.mode, f"moved {path} -> {target}")


def _guard(workspace: Path, plan: list[_Planned]) -> None:
    """Refuse the patch if it touches one of git's control paths (`gitguard`): every
    source and target is resolved and checked before anything is made or written."""
    for planned in plan:
        for path in (planned.change.path, planned.target):
            with contextlib.suppress(NotFound):
                parent, _ = _locate(workspace, path, make_dirs=False, guard=True)
                os.close(parent)


def _stage(workspace: Path, planned: _Planned, guard: bool, owner: HostIds | None) -> None:
    """Open the directories a change touches and write its new text beside its file, the
    directories it makes and the text `owner`'s."""
    change = planned.change
    if change.action == "delete" or change.move_to is not None:
        planned.source_parent, planned.source_name = _locate(
            workspace, change.path, make_dirs=False, guard=guard
        )
    if planned.data is None:
        return
    planned.parent, planned.name = _locate(
        workspace, planned.target, make_dirs=True, guard=guard, owner=owner
    )
    planned.temporary = f".{planned.name[:200]}.{secrets.token_hex(4)}.tmp"
    fd = os.open(
        planned.temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=planned.parent,
    )
    with os.fdopen(fd, "wb") as stream:
        stream.write(planned.data)
        stream.flush()
        give(fd, owner)
        os.fchmod(fd, written_mode(planned.mode))
        os.fsync(fd)


def _commit(planned: _Planned) -> None:
    if planned.data is not None:
        os.rename(
            planned.temporary, planned.name, src_dir_fd=planned.parent, dst_dir_fd=planned.parent
        )
        planned.temporary = ""
    if planned.source_parent >= 0:
        os.unlink(planned.source_name, dir_fd=planned.source_parent)


def _release(plan: list[_Planned]) -> None:
    for planned in plan:
        if planned.temporary:
            with contextlib.suppress(OSError):
                os.unlink(planned.temporary, dir_fd=planned.parent)
        for fd in (planned.parent, planned.source_parent):
            if fd >= 0:
                os.close(fd)


def apply_patch(
    workspace: Path,
    request: ApplyPatchInput,
    owner: HostIds | None,
    *,
    git_writable: bool = False,
    redactor: Redactor | None = None,
) -> str:
    """Apply a whole patch, or change nothing and say which file and hunk did not fit
    (quoting the file's nearest lines cut of `redactor`'s values); what it writes is
    `owner`'s; one that touches git's control paths only with `git_writable`."""
    changes = parse_patch(request.patch)
    named: set[str] = set()
    for change in changes:
        for path in (change.path, change.move_to):
            key = "/".join(_parts(path)) if path else ""
            if key and key in named:
                raise InvalidInput(
                    f"the patch changes {shown(path or '')} more than once: put all of its "
                    "hunks under one header"
                )
            named.add(key)
    try:
        plan = [_plan(workspace, change, redactor) for change in changes]
        if not git_writable:
            _guard(workspace, plan)
    except (InvalidInput, NotFound) as error:
        raise type(error)(
            short(f"the patch was not applied (no file changed): {error.message}")
        ) from None
    try:
        try:
            for planned in plan:
                _stage(workspace, planned, not git_writable, owner)
        except OSError as error:
            raise InvalidInput(
                f"the patch fits, but its new files could not be written ({error.strerror}); "
                "nothing was changed"
            ) from None
        for planned in plan:
            _commit(planned)
    finally:
        _release(plan)
    return "\n".join(planned.said for planned in plan)
