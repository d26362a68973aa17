"""`read_file` and `write_file`, confined to the workspace whatever its links say.

A path is walked one component at a time from a descriptor of the workspace, each
directory opened with `O_NOFOLLOW`: `..` may not climb above the workspace, and a symbolic
link is followed only while it stays inside (an absolute target counts as inside when it
names `/workspace/...`, the sandbox's view). A write never goes through a hard link: a
file with more than one link is refused, and the new content lands by rename. A write to
one of git's control paths (`gitguard.control_path`, matched on the resolved components)
is refused unless the operator's `BASTION_GIT_WRITABLE` allows it.

`read_file_now` answers a read on the event loop when nothing of it can wait: a walk of
at most `NOW_STEPS` directory lookups (no open of anything but a directory on the way,
the file's own open non-blocking), a regular file of at most `NOW_BYTES` and `NOW_LINES`
read whole from the page cache (`RWF_NOWAIT`); anything else (a longer walk, a larger
file, one not cached) is left to `read_file` in a worker thread. A numbering on the loop
is of at most `NOW_LINES` lines, CPU work shorter than the interpreter's switch interval: a
worker thread would hold the GIL, so the loop, as long for it.

What a write creates (the new file, the directories on its way) is given, by its open
descriptor, to the session's host user (`owner`: the same unprivileged user the shell's
sandbox runs as, `bastion.shared.sandboxing.hostids`), so what `write_file` creates and what
the shell creates have one owner on the host, and a root service never leaves a root-owned
file in a workspace. A file replaced keeps its permission bits but never a setuid or setgid
bit. A service that is not root has no `owner`: what it creates is its own user's, as the
shell's is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from bastion.proto.toolinput import ReadFileInput, WriteFileInput
from bastion.sandbox.numbering import MAX_LINE_CHARS, MAX_READ_CHARS, numbered, numbered_whole
from bastion.sandbox.workspace import shown
from bastion.shared.cutturns import INLINE_CHARS
from bastion.shared.errors import InvalidInput, NotFound
from bastion.shared.redaction import Redactor
from bastion.shared.sandboxing import WORKSPACE, HostIds
from bastion.shared.sandboxing.gitguard import control_path, refusal

__all__ = [
    "MAX_LINE_CHARS",
    "MAX_READ_CHARS",
    "NOW_BYTES",
    "NOW_LINES",
    "NOW_STEPS",
    "Budget",
    "WouldBlock",
    "open_for_reading",
    "read_file",
    "read_file_now",
    "read_text",
    "write_file",
]

NOW_STEPS: Final = 64
"""The most steps (a component looked up, a link read) a walk may take on the event loop."""
NOW_BYTES: Final = 64 * 1024
"""The largest file `read_file_now` reads on the event loop."""
NOW_LINES: Final = 2000
"""The most lines a file `read_file_now` numbers on the event loop may hold."""
_MAX_LINKS: Final = 40
_WHOLE_BYTES: Final = 256 * 1024
"""A file up to this size is read whole, then numbered (`numbering.numbered_whole`): its
lines, split at once, take a few MiB at most; a larger one is numbered line by line."""
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NO_SET_IDS: Final = ~(stat.S_ISUID | stat.S_ISGID) & 0o7777


class WouldBlock(Exception):
    """The work could wait (a walk past its `Budget`, a file not in the page cache): it is
    to be done in a worker thread, never on the event loop."""


class Budget:
    """How many more steps a walk done on the event loop may take (`NOW_STEPS` at first)."""

    def __init__(self, steps: int = NOW_STEPS) -> None:
        self.left = steps

    def spend(self) -> None:
        """One step taken.

        Raises:
            WouldBlock: the budget is spent.
        """
        self.left -= 1
        if self.left < 0:
            raise WouldBlock


def written_mode(mode: int) -> int:
    """The permission bits a written file gets from `mode`: never setuid nor setgid."""
    return stat.S_IMODE(mode) & _NO_SET_IDS


def give(fd: int, owner: HostIds | None) -> None:
    """Give what `fd` opens to `owner` (nothing to do without one)."""
    if owner is not None:
        os.fchown(fd, owner.uid, owner.gid)


def _parts(path: str) -> list[str]:
    """The components of a path given relative to the workspace or under `/workspace`."""
    if "\0" in path:
        raise InvalidInput("a path may not hold a NUL character: give a plain file path")
    if path.startswith("/"):
        if path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
            raise InvalidInput(
                f"{shown(path)} is outside the workspace: give a path relative to the "
                f"workspace, or one under {WORKSPACE}"
            )
        path = path[len(WORKSPACE) :]
    return [part for part in path.split("/") if part not in ("", ".")]


def _escape(path: str, how: str) -> InvalidInput:
    return InvalidInput(
        f"{shown(path)} {how}, outside the workspace: give a path inside the workspace"
    )


def _follow(stack: list[int], names: list[str], name: str, path: str, links: int) -> list[str]:
    """The components a link on the way (the `links`th) stands for; an absolute one
    (`/workspace/...`) restarts from the workspace, so `stack` and `names` go back to it."""
    if links > _MAX_LINKS:
        raise InvalidInput(
            f"{shown(path)} goes through too many symbolic links: give the file's own path"
        )
    target = os.readlink(name, dir_fd=stack[-1])
    if target.startswith("/"):
        if target != WORKSPACE and not target.startswith(WORKSPACE + "/"):
            raise _escape(path, "passes through a symbolic link to a place")
        while len(stack) > 1:
            os.close(stack.pop())
        names.clear()
    return _parts(target)


def _enter(parent: int, name: str, path: str) -> int:
    """A descriptor of the directory `name` in `parent`, which may not have become a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise InvalidInput(
                f"{shown(path)} changed while it was being opened: try again"
            ) from None
        raise


def _look(name: str, parent: int, budget: Budget | None) -> os.stat_result:
    """`name`'s own status in the directory `parent` (no link followed): a step of `budget`."""
    if budget is not None:
        budget.spend()
    return os.stat(name, dir_fd=parent, follow_symlinks=False)


def _locate(
    workspace: Path,
    path: str,
    *,
    make_dirs: bool,
    directory: bool = False,
    guard: bool = False,
    owner: HostIds | None = None,
    budget: Budget | None = None,
) -> tuple[int, str]:
    """The directory (a new descriptor, the caller's to close) holding `path`'s last
    component, and that component's name; every link on the way stays inside `workspace`.
    With `directory`, a path that ends at a directory (`.`, `a/..`) gives it and `.`.
    With `guard`, a path that resolves to one of git's control paths is refused before
    any directory is made for it (`gitguard.control_path`, on the resolved components).
    A directory made on the way is given to `owner`. A system refusal (permissions...) is
    a sentence. With `budget`, each step spends one of it (`WouldBlock` once spent)."""
    stack: list[int] = []
    names: list[str] = []

    def guarded(*rest: str) -> None:
        if guard and control_path([*names, *rest]):
            raise refusal(shown(path))

    links = 0
    try:
        stack.append(os.open(workspace, _DIR_FLAGS))
        pending = _parts(path)
        while pending:
            made = False
            name = pending.pop(0)
            if name == "..":
                if len(stack) == 1:
                    raise _escape(path, "climbs above the workspace with `..`")
                os.close(stack.pop())
                names.pop()
                continue
            try:
                info = _look(name, stack[-1], budget)
            except FileNotFoundError:
                guarded(name, *pending)  # what is missing would be made as it is named
                if not pending:
                    return os.dup(stack[-1]), name
                if not make_dirs:
                    raise NotFound(
                        f"there is no {shown(path)} in the workspace: its directory "
                        f"{shown(name)} does not exist; check the path"
                    ) from None
                os.mkdir(name, 0o755, dir_fd=stack[-1])
                made = True
                info = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                links += 1
                pending = _follow(stack, names, name, path, links) + pending
                continue
            if not pending:
                guarded(name)
                return os.dup(stack[-1]), name
            if not stat.S_ISDIR(info.st_mode):
                raise InvalidInput(
                    f"{shown(path)} cannot be reached: {shown(name)} on the way is not a directory"
                )
            stack.append(_enter(stack[-1], name, path))
            names.append(name)
            if made:
                give(stack[-1], owner)
        if directory:
            guarded()
            return os.dup(stack[-1]), "."
        raise InvalidInput(f"{shown(path)} is a directory, not a file: give a file's path")
    except OSError as error:
        raise InvalidInput(f"{shown(path)} cannot be reached: {error.strerror}") from None
    finally:
        for fd in stack:
            os.close(fd)


def open_for_reading(
    root: Path, path: str, *, workspace: bool = True, budget: Budget | None = None
) -> tuple[int, int]:
    """A read-only descriptor (the caller's to close) of the regular file `path` under
    `root`, reached by `_locate` and never through a last link, and its size. With
    `workspace`, the sentences speak of the workspace and a file that became a link while
    it was opened is an escape from it; without (a skills dir), a missing file is a name to
    check. `budget` bounds the walk (`_locate`).

    Raises:
        NotFound: there is no such file.
        InvalidInput: it cannot be reached or opened, or is not a regular file.
    """
    fd = _open_file(root, path, workspace=workspace, budget=budget)
    try:
        # checked on the descriptor, before it may become a stream: `fdopen` refuses a
        # directory's with an OSError of its own, which would not be this sentence
        return fd, _regular_size(fd, path)
    except BaseException:
        os.close(fd)
        raise


def _open_file(root: Path, path: str, *, workspace: bool, budget: Budget | None) -> int:
    parent, name = _locate(root, path, make_dirs=False, budget=budget)
    try:
        return os.open(name, _READ_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        where = " in the workspace: check the path" if workspace else ": check the name"
        raise NotFound(f"there is no file {shown(path)}{where}") from None
    except OSError as error:
        if workspace and error.errno == errno.ELOOP:
            raise _escape(path, "became a symbolic link while it was opened") from None
        raise InvalidInput(f"{shown(path)} cannot be read: {error.strerror}") from None
    finally:
        os.close(parent)


def _regular_size(fd: int, path: str) -> int:
    """The size of the file `fd` opens, once it is a regular file.

    Raises:
        InvalidInput: it is a directory, a device, a pipe or a socket.
    """
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise InvalidInput(f"{shown(path)} is a directory, not a file: give a file's path")
    if not stat.S_ISREG(info.st_mode):
        raise InvalidInput(
            f"{shown(path)} is not a regular file (a device, pipe or socket): give a file's path"
        )
    return info.st_size


def read_file(workspace: Path, request: ReadFileInput, redactor: Redactor | None = None) -> str:
    """Lines `offset`.. of a workspace file, numbered, at most `limit` of them; cut of
    `redactor`'s values before they are numbered and shortened."""
    fd, size = open_for_reading(workspace, request.path)
    with os.fdopen(fd, "rb") as stream:
        if size <= _WHOLE_BYTES:
            data = stream.read(_WHOLE_BYTES + 1)
            if len(data) <= _WHOLE_BYTES:
                return numbered_whole(data, request.path, request.offset, request.limit, redactor)
            stream.seek(0)  # it grew meanwhile: line by line
        return numbered(stream, request.path, request.offset, request.limit, redactor)


def read_file_now(
    workspace: Path, request: ReadFileInput, redactor: Redactor | None = None
) -> str | None:
    """`read_file`'s answer, its errors too, when it can be had without waiting (none of
    the steps below can): a walk of at most `NOW_STEPS` steps, the file opened
    `O_NONBLOCK` (a FIFO opens at once, and is refused as one), a regular file of at most
    `NOW_BYTES` and `NOW_LINES` read whole by one `RWF_NOWAIT` read from the page cache;
    None when it could wait (`read_file` is to run in a worker thread then). Cut of
    `redactor`'s values first (`read_file`), on the event loop only when the file is
    smaller than `cutturns.INLINE_CHARS` bytes."""
    try:
        fd, size = open_for_reading(workspace, request.path, budget=Budget())
    except WouldBlock:
        return None
    try:
        if size > NOW_BYTES or (redactor and size >= INLINE_CHARS):
            return None
        buffer = bytearray(size + 1)
        try:
            got = os.preadv(fd, [buffer], 0, os.RWF_NOWAIT)
        except OSError:
            return None  # not cached (EAGAIN), not supported here, or to be said by read_file
    finally:
        os.close(fd)
    if got != size or buffer.count(b"\n", 0, got) > NOW_LINES:
        return None  # the file changed size meanwhile, or partly cached, or many lines
    return numbered_whole(
        bytes(buffer[:got]), request.path, request.offset, request.limit, redactor
    )


def _replace(parent: int, name: str, data: bytes, mode: int, owner: HostIds | None) -> None:
    """`data` written beside `name`, given to `owner`, and renamed over it, so a reader
    sees old or new."""
    temporary = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=parent,
    )
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            give(fd, owner)
            os.fchmod(fd, written_mode(mode))
            os.fsync(fd)
        os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=parent)
        raise


def write_file(
    workspace: Path, request: WriteFileInput, owner: HostIds | None, *, git_writable: bool = False
) -> str:
    """Write a whole workspace file atomically, creating its directories, all `owner`'s;
    one of git's control paths only with `git_writable`."""
    data = request.content.encode()
    parent, name = _locate(
        workspace, request.path, make_dirs=True, guard=not git_writable, owner=owner
    )
    try:
        try:
            existing = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            mode = 0o644
        else:
            if stat.S_ISDIR(existing.st_mode):
                raise InvalidInput(
                    f"{shown(request.path)} is a directory: give a file's path to write"
                )
            if not stat.S_ISREG(existing.st_mode):
                raise InvalidInput(
                    f"{shown(request.path)} is not a regular file: give a file's path to write"
                )
            if existing.st_nlink > 1:
                raise InvalidInput(
                    f"{shown(request.path)} has {existing.st_nlink} hard links and may be "
                    "shared with a file outside the workspace: remove it first, or write "
                    "another path"
                )
            mode = stat.S_IMODE(existing.st_mode)
        _replace(parent, name, data, mode, owner)
    except OSError as error:
        raise InvalidInput(f"{shown(request.path)} cannot be written: {error.strerror}") from None
    finally:
        os.close(parent)
    return f"wrote {len(data)} bytes to {request.path}"


def read_text(root: Path, path: str, max_bytes: int) -> str:
    """A whole text file under `root`, reached like a workspace file (no link leads out).

    Raises:
        NotFound: there is no such file.
        InvalidInput: it is not a regular file, holds no UTF-8 text, or exceeds `max_bytes`.
    """
    fd, _ = open_for_reading(root, path, workspace=False)
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InvalidInput(f"{shown(path)} is larger than {max_bytes} bytes: keep it shorter")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{shown(path)} is not UTF-8 text") from None
