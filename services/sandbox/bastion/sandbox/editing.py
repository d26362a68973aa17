"""`edit_file`: replace a quoted stretch of a workspace file, keeping its line endings."""

from __future__ import annotations

from pathlib import Path

from bastion.proto.toolinput import EditFileInput, WriteFileInput
from bastion.sandbox.files import write_file
from bastion.sandbox.textfile import not_found_sentence, read_text, with_newlines
from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput
from bastion.shared.redaction import Redactor
from bastion.shared.sandboxing import HostIds

__all__ = ["edit_file"]


def edit_file(
    workspace: Path,
    request: EditFileInput,
    owner: HostIds | None,
    *,
    git_writable: bool = False,
    redactor: Redactor | None = None,
) -> str:
    """Replace `old_string` once (it must be there once) or, with `replace_all`, each time;
    the file written is `owner`'s (`files.write_file`); in one of git's control files only
    with `git_writable`. A miss quotes the nearest lines cut of `redactor`'s values."""
    old = request.old_string.replace("\r\n", "\n")
    new = request.new_string.replace("\r\n", "\n")
    if not old:
        raise InvalidInput("old_string is empty: quote the text to replace")
    if old == new:
        raise InvalidInput("old_string and new_string are the same: there is nothing to change")
    current = read_text(workspace, request.path)
    count = current.text.count(old)
    if count == 0:
        raise InvalidInput(
            not_found_sentence(
                f"old_string is not in {shown(request.path)}",
                current.text.split("\n"),
                old.split("\n"),
                redactor,
            )
        )
    if count > 1 and not request.replace_all:
        raise InvalidInput(
            f"old_string is in {shown(request.path)} {count} times: quote more of the lines "
            "around the one to change so that it is there once, or set replace_all to change "
            "every one"
        )
    text = (
        current.text.replace(old, new) if request.replace_all else current.text.replace(old, new, 1)
    )
    write_file(
        workspace,
        WriteFileInput(path=request.path, content=with_newlines(text, current.newline)),
        owner,
        git_writable=git_writable,
    )
    times = "1 time" if count == 1 else f"{count} times"
    return f"edited {request.path}: replaced old_string {times}"
