"""The one table of git's control files, and the plan that keeps a sandbox off them.

A hook or a config written by a command would run later, outside any sandbox, when a
person or an operator's hook runs git in the workspace. Every entry git reads for
configuration or hooks is therefore read-only inside a sandbox (unless the operator sets
`BASTION_GIT_WRITABLE`), and no host path is trusted twice: each entry is opened once,
with `O_PATH | O_NOFOLLOW`, relative to a descriptor of the workspace, checked with
`fstat`, and that descriptor is what is bound (bubblewrap's `--bind-fd`/`--ro-bind-fd`,
which check that the mount shows the descriptor's file; the Docker backend proves it
after the container starts).

- `.git` is bound onto `/workspace/.git`: a mount point, so a command can neither rename
  nor remove it nor replace it with a `gitdir:` file. A `.git` file (a `gitdir:` link) is
  bound read-only. A workspace that is no repository (no `.git`, or one without `HEAD`)
  gets an empty `.git` directory, the workspace owner's, bound read-only: no repository
  can be made inside.
- `config`, `config.worktree`, `hooks`, `worktrees`, `modules`: bound read-only; a
  missing one is first made empty, the owner of `.git`'s (an empty config is a valid one;
  empty directories are harmless to git).
- `commondir`, `gitdir`, and the workspace's `.gitconfig` and `.config/git` (HOME is the
  workspace inside): bound read-only when present. A missing one cannot be stood in for
  (git dies reading an empty `commondir`), so one a command made is moved aside when
  the command ends (`GitGuard.sweep`), and the result says so; so is a `.config/git`
  reached through another `.config` than the one the run started with.
- A control entry that is a symbolic link or of the wrong type (a `hooks` that is a
  file) cannot be protected where git would follow it: the call is refused, saying
  which entry to fix (`GitEntryRefused`). No sandbox can make one: only the host can.
  So is a link or a non-directory where git reads text through a directory
  (`objects`, `objects/info`, `objects/pack`, `info`, `refs`, `logs`: `_LINK_AREAS`) as
  the run starts; one a command makes there is moved aside when it ends (`GitGuard.sweep`).

`control_path` is the same table for the file tools, which refuse to touch these paths.
`LOCKED_GIT_ENVIRONMENT` is how git runs on the host for a command hook.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bastion.shared.errors import InvalidInput
from bastion.shared.sandboxing.errors import SandboxFailed

__all__ = [
    "CONTROL_DIRS",
    "CONTROL_FILES",
    "HOME_DIRS",
    "HOME_FILES",
    "LINKS_NEVER_KEPT",
    "LOCKED_GIT_CONFIG",
    "LOCKED_GIT_ENVIRONMENT",
    "WATCHED_FILES",
    "GitBind",
    "GitEntryRefused",
    "GitGuard",
    "closing_check",
    "control_path",
    "guard",
    "left_behind",
    "locked_git_environment",
    "refusal",
]

CONTROL_FILES: Final = ("config", "config.worktree")
"""Files of a `.git` directory git reads configuration from: a missing one is made empty."""
CONTROL_DIRS: Final = ("hooks", "worktrees", "modules")
"""Directories of a `.git` directory holding hooks or other repositories' configuration:
a missing one is made empty."""
WATCHED_FILES: Final = ("commondir", "gitdir")
"""Files of a `.git` directory that redirect git elsewhere: nothing may stand in for one."""
HOME_FILES: Final = (".gitconfig",)
"""The workspace's own git configuration, read by git inside (HOME is the workspace)."""
HOME_DIRS: Final = ((".config", "git"),)
"""The workspace's `.config/git`, read by git inside for the same reason."""

_OPEN: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_SWITCH: Final = (
    "set BASTION_GIT_WRITABLE=true for the sandbox service to let commands and the file "
    "tools change it"
)

LOCKED_GIT_CONFIG: Final = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", "false"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("fetch.recurseSubmodules", "false"),
    ("protocol.allow", "never"),
)
"""Settings forced on git run for a command hook: no program named by configuration runs,
no submodule is entered (its config is the agent's), no transport is used."""


def locked_git_environment() -> dict[str, str]:
    """Environment variables that make git ignore the system's and the user's config and
    force `LOCKED_GIT_CONFIG` over the repository's (`GIT_CONFIG_COUNT` ranks above it)."""
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_SYSTEM": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_COUNT": str(len(LOCKED_GIT_CONFIG)),
    }
    for number, (key, value) in enumerate(LOCKED_GIT_CONFIG):
        env[f"GIT_CONFIG_KEY_{number}"] = key
        env[f"GIT_CONFIG_VALUE_{number}"] = value
    return env


LOCKED_GIT_ENVIRONMENT: Final = locked_git_environment()


class GitEntryRefused(InvalidInput):
    """A control entry of the workspace's git cannot be protected as it is."""


def control_path(parts: Sequence[str]) -> bool:
    """Whether a workspace path, as resolved components, is or lies in a control entry:
    a `.git` anywhere (nested repositories too), what git reads for configuration or
    hooks inside one or for other object stores (`POINTER_FILES`), or the workspace's
    `.gitconfig` and `.config/git`."""
    if not parts:
        return False
    if parts[0] in HOME_FILES and len(parts) == 1:
        return True
    if any(tuple(parts[: len(home)]) == home for home in HOME_DIRS):
        return True
    for index, part in enumerate(parts):
        if part != ".git":
            continue
        rest = parts[index + 1 :]
        if not rest:
            return True
        if rest[0] in CONTROL_DIRS:
            return True
        if len(rest) == 1 and rest[0] in (*CONTROL_FILES, *WATCHED_FILES):
            return True
        if "/".join(rest) in POINTER_FILES:
            return True
    return False


def refusal(path: str) -> InvalidInput:
    """The file tools' answer to a change of a control path."""
    return InvalidInput(
        f"{path} is one of git's control files (configuration, hooks, or where git looks "
        "for them), which would run outside any sandbox when git is used on the host: it "
        f"may not be created or changed by an agent; {_SWITCH}"
    )


_State = tuple[str, int, int, int, int] | None
"""What is at a path of `.git` (or of the workspace): the path of what was found there (the
file, or the first component of its way that is no directory) and its device, inode, size
and change time."""
_Link = tuple[str, int, int]
"""A symbolic link of `.git`: its path, device and inode (a link replaced is a new one)."""


@dataclass
class _Watched:
    """A control entry that was missing when the run started: moved aside if made."""

    parent: int
    name: str
    shown: str


@dataclass(frozen=True)
class GitBind:
    """One checked control entry: its descriptor and its path in the workspace."""

    fd: int
    path: str
    writable: bool = False


@dataclass
class GitGuard:
    """The open descriptors of one run's protection, what to bind, and its sweep."""

    binds: list[GitBind] = field(default_factory=list)
    watched: list[_Watched] = field(default_factory=list)
    _owned: list[int] = field(default_factory=list)
    _git: int | None = None
    """The repository's `.git`, when the workspace is one: its links are swept too."""
    _links: frozenset[_Link] = frozenset()
    """The symbolic links in the parts of `.git` git reads as text, before the command."""
    _pointers: dict[str, _State] = field(default_factory=dict)
    """Each of `POINTER_FILES` as it was before the command (None: missing)."""
    found: list[str] = field(default_factory=list)
    """What the plan moved aside before the run (a sentence each), told with the sweep's."""
    _root: int | None = None
    """The workspace: its `HOME_DIRS` are looked at again after the command."""
    _homes: dict[str, _State] = field(default_factory=dict)
    """What each of `HOME_DIRS` led to before the command (path, device and inode)."""

    @property
    def repository(self) -> bool:
        """Whether the workspace is a repository (its `.git` is swept after each run)."""
        return self._git is not None

    def options(self, inside: str) -> list[str]:
        """bwrap's options binding each entry by its descriptor, under `inside`."""
        options: list[str] = []
        for bind in self.binds:
            flag = "--bind-fd" if bind.writable else "--ro-bind-fd"
            options += [flag, str(bind.fd), f"{inside}/{bind.path}"]
        return options

    @property
    def fds(self) -> list[int]:
        """The descriptors bwrap must inherit."""
        return [bind.fd for bind in self.binds]

    def identity(self) -> list[tuple[str, int, int]]:
        """Each bound entry's path and its device and inode: what a mount must show."""
        found = []
        for bind in self.binds:
            info = os.fstat(bind.fd)
            found.append((bind.path, info.st_dev, info.st_ino))
        return found

    def _open(self, name: str, parent: int) -> tuple[int, os.stat_result] | None:
        try:
            fd = os.open(name, _OPEN, dir_fd=parent)
        except FileNotFoundError:
            return None
        self._owned.append(fd)
        return fd, os.fstat(fd)

    def _bind(self, fd: int, path: str, *, writable: bool = False) -> None:
        self.binds.append(GitBind(fd, path, writable))

    def _made(self, name: str, parent: int, directory: bool) -> tuple[int, os.stat_result]:
        """`name` in `parent`, made empty (the owner's of `parent`) if it is missing."""
        found = self._open(name, parent)
        if found is not None:
            return found
        owner = os.fstat(parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            if directory:
                os.mkdir(name, 0o755, dir_fd=parent)
            else:
                os.close(os.open(name, flags, 0o644, dir_fd=parent))
        except FileExistsError:
            pass  # made meanwhile (another run starting): checked below as found
        else:
            if os.geteuid() == 0:
                os.chown(name, owner.st_uid, owner.st_gid, dir_fd=parent, follow_symlinks=False)
        made = self._open(name, parent)
        if made is None:
            raise FileNotFoundError(name)
        return made

    def _entries(self, git: int) -> None:
        for name in (*CONTROL_FILES, *CONTROL_DIRS):
            directory = name in CONTROL_DIRS
            fd, info = self._made(name, git, directory)
            if not (stat.S_ISDIR if directory else stat.S_ISREG)(info.st_mode):
                raise _odd(f".git/{name}", info, "a directory" if directory else "a file")
            self._bind(fd, f".git/{name}")
        for name in WATCHED_FILES:  # none there now: moved aside first (`left_behind`)
            self.watched.append(_Watched(git, name, f".git/{name}"))

    def _home(self, workspace: int) -> None:
        self._root = workspace
        self._homes = {"/".join(home): _way(workspace, "/".join(home)) for home in HOME_DIRS}
        for name in HOME_FILES:
            found = self._open(name, workspace)
            if found is None:
                self.watched.append(_Watched(workspace, name, name))
                continue
            fd, info = found
            if not stat.S_ISREG(info.st_mode):
                raise _odd(name, info, "a file")
            self._bind(fd, name)
        for parent_name, name in HOME_DIRS:
            parent = self._open(parent_name, workspace)
            shown = f"{parent_name}/{name}"
            if parent is None or not stat.S_ISDIR(parent[1].st_mode):
                # nothing git reads there now; one a command makes is swept
                self.watched.append(_Watched(workspace, shown, shown))
                continue
            found = self._open(name, parent[0])
            if found is None:
                self.watched.append(_Watched(parent[0], name, shown))
                continue
            fd, info = found
            if not stat.S_ISDIR(info.st_mode):
                raise _odd(shown, info, "a directory")
            self._bind(fd, shown)

    def plan(self, workspace: Path) -> None:
        """Open and check every control entry of `workspace`."""
        root = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._owned.append(root)
        self.found += left_behind(root)  # first: before any check that can refuse the run
        self._home(root)
        fd, info = self._made(".git", root, directory=True)
        if stat.S_ISREG(info.st_mode):
            self._bind(fd, ".git")  # a `gitdir:` file
        elif not stat.S_ISDIR(info.st_mode):
            raise _odd(".git", info, "a directory or a `gitdir:` file")
        elif self._open("HEAD", fd) is None:
            self._bind(fd, ".git")  # no repository: none can be made inside
        else:
            self._bind(fd, ".git", writable=True)
            self._entries(fd)
            _areas_are_directories(fd)
            self._git = fd
            self._links = _links_in(fd)
            self._pointers = {name: _state(fd, name) for name in POINTER_FILES}

    def sweep(self) -> list[str]:
        """Move aside each watched entry the command made, each symbolic link it made where
        git reads text (`_LINK_AREAS`), each link or non-directory it put on the way to one
        of those parts, and each pointer file it made or changed; a sentence for each."""
        said, self.found = self.found, []
        if self._git is not None:
            for link, *_ in sorted(_links_in(self._git) - self._links):
                said += _link_aside(self._git, link)
            for area, _ in _LINK_AREAS[1:]:
                odd = _state(self._git, area, directory=True)
                if odd is not None:
                    said += _link_aside(self._git, odd[0])
            for name, before in self._pointers.items():
                after = _state(self._git, name)
                if after is not None and after != before:
                    said += _link_aside(self._git, after[0])
        for entry in self.watched:
            *dirs, name = entry.name.split("/")
            if not dirs:
                said += _move_aside(entry.parent, name, entry.shown)
                continue
            try:
                parent = os.open(dirs[0], _OPEN | os.O_DIRECTORY, dir_fd=entry.parent)
            except OSError:
                continue  # not made, or not a directory git would read
            try:
                said += _move_aside(parent, name, entry.shown)
            finally:
                os.close(parent)
        if self._root is not None:
            for home, before in self._homes.items():
                after = _way(self._root, home)
                if after is not None and after != before:  # another `.config` in the way
                    said += _aside(self._root, after[0], "")
        return said

    def close(self) -> None:
        for fd in self._owned:
            os.close(fd)
        self._owned.clear()


def _odd(shown: str, info: os.stat_result, wanted: str) -> GitEntryRefused:
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not " + wanted
    return GitEntryRefused(
        f"the workspace's {shown} is {kind}, so git on the host would follow it where no "
        f"sandbox can protect it: replace it with {wanted} of the workspace's own (or "
        f"remove it) on the host, or {_SWITCH}"
    )


_LINK_AREAS: Final = (
    ("", False),
    ("info", True),
    ("objects", False),
    ("objects/info", True),
    ("objects/pack", False),
    ("refs", True),
    ("logs", True),
)
"""The parts of `.git` (and whether below them too) that git reads as text or as another
store's objects: HEAD and the other heads, packed-refs, `info/` (grafts, exclude,
attributes), `objects/info` (alternates, the commit-graph chain), the packs, refs and
reflogs. A symbolic link there would make git on the host (root's, for one) read the file
it names and quote it in an error (`alternates -> /etc/shadow`), so one a command makes is
moved aside; and each part but the top must be a directory of `.git`'s own (a link at
`objects/info` leads git's reads elsewhere): a link or other non-directory there refuses
the run as it starts, and one a command puts there is moved aside."""
_MAX_LINK_ENTRIES: Final = 50_000
_CAPPED: Final = ("refs", "logs")
"""The areas a big repository fills (loose refs and their logs), where git names a linked
file it cannot parse (`ignoring broken ref`) rather than quote it: at most
`_MAX_LINK_ENTRIES` entries of each are looked at."""
_DIR_OPEN: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


LINKS_NEVER_KEPT: Final = (
    "objects/info/alternates",
    "objects/info/http-alternates",
    "info/grafts",
    "shallow",
)
"""Files git reads as text and never makes a link: a link at one, found as a run starts,
was left by something that outlived a command's sweep, and is moved aside before the run
(git on the host would quote what it names: `alternates -> /etc/shadow`)."""


def left_behind(workspace: int, *, areas: bool = False) -> list[str]:
    """Move aside, in the repository of the workspace whose descriptor is `workspace`, what
    a repository's own `.git` never holds — a `commondir` or `gitdir` at its top (a linked
    worktree's live under `.git/worktrees/`), a link at one of `LINKS_NEVER_KEPT` — and,
    with `areas` (a closed session's check), a link or non-directory at one of the parts
    git reads through (`_LINK_AREAS`): what something that outlived a sweep left. A
    sentence for each."""
    try:
        git = _open_dir(workspace, ".git")
    except OSError:
        return []  # no `.git` directory: nothing of this kind to find
    said: list[str] = []
    try:
        if os.path.lexists(f"/proc/self/fd/{git}/HEAD"):
            for name in WATCHED_FILES:
                said += _move_aside(git, name, f".git/{name}", found=True)
            for name in LINKS_NEVER_KEPT:
                *dirs, leaf = name.split("/")
                try:
                    parent = _open_dir(git, "/".join(dirs))
                except OSError:
                    continue
                try:
                    info = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
                    if stat.S_ISLNK(info.st_mode):
                        said += _move_aside(parent, leaf, f".git/{name}", found=True)
                except OSError:
                    pass
                finally:
                    os.close(parent)
            if areas:
                for area, _ in _LINK_AREAS[1:]:
                    odd = _state(git, area, directory=True)
                    if odd is not None:
                        said += _link_aside(git, odd[0], found=True)
    finally:
        os.close(git)
    return said


def closing_check(workspace: Path) -> list[str]:
    """`left_behind` of `workspace`, areas included: for a session that closed, once
    nothing of it runs."""
    root = os.open(workspace.resolve(), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return left_behind(root, areas=True)
    finally:
        os.close(root)


POINTER_FILES: Final = ("objects/info/alternates", "objects/info/http-alternates")
"""Files naming other object stores: one a command makes or changes would point git on the
host (a hook's, a person's) at any store its user can read — another repository's history,
which no sandbox shows — so it is moved aside after the command (a changed one too: put a
repository's own back by hand)."""


def _state(base: int, path: str, *, directory: bool = False) -> _State:
    """What git would reach at `path` (relative to `base`: `.git`, or the workspace), looked
    at without following a link: None when nothing is there (or, for a `directory`, a
    directory of `base`'s own is); a link or non-directory on the way is what is found, not
    a missing file."""
    parts = path.split("/")
    fd = os.open(".", _DIR_OPEN, dir_fd=base)
    try:
        for depth, part in enumerate(parts):
            info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):
                found = "/".join(parts[: depth + 1])
                return found, info.st_dev, info.st_ino, info.st_size, info.st_ctime_ns
            if depth == len(parts) - 1:
                if directory:
                    return None
                return path, info.st_dev, info.st_ino, info.st_size, info.st_ctime_ns
            inner = os.open(part, _DIR_OPEN, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        return None  # missing (or changed while looked at: looked at again next run)
    finally:
        os.close(fd)
    return None


def _open_dir(base: int, path: str) -> int:
    """A descriptor of the directory `path` (relative to `base`, "" for `base` itself),
    reached one component at a time without following a link (`O_NOFOLLOW` alone guards
    the last one only: a linked `objects` would lead `objects/info` out of the workspace)."""
    fd = os.open(".", _DIR_OPEN, dir_fd=base)
    try:
        for part in filter(None, path.split("/")):
            inner = os.open(part, _DIR_OPEN, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _way(root: int, path: str) -> _State:
    """What `path` leads to, as `_state` finds it, by its path, device and inode only (a
    directory's size and change time change with what is in it)."""
    found = _state(root, path)
    return None if found is None else (*found[:3], 0, 0)


def _areas_are_directories(git: int) -> None:
    """Refuse a `.git` where a part of `_LINK_AREAS` is a link or no directory: what git
    reads through it could not be watched without following the link."""
    for area, _ in _LINK_AREAS[1:]:
        odd = _state(git, area, directory=True)
        if odd is not None:
            info = os.stat(odd[0], dir_fd=git, follow_symlinks=False)
            raise _odd(f".git/{odd[0]}", info, "a directory")


def _links_in(git: int) -> frozenset[_Link]:
    """The symbolic links in `_LINK_AREAS` of the `.git` whose descriptor is `git`, as paths
    relative to it with their device and inode. Every entry is looked at but in `_CAPPED`
    areas, where at most `_MAX_LINK_ENTRIES` each are (a command filling one area must not
    keep the sweep from another)."""
    found: set[_Link] = set()
    for area, below in _LINK_AREAS:
        seen = 0
        pending = [area]
        while pending and (area not in _CAPPED or seen < _MAX_LINK_ENTRIES):
            where = pending.pop()
            try:
                fd = _open_dir(git, where)
            except OSError:
                continue  # missing, or itself a link (found from its parent's listing)
            try:
                with os.scandir(fd) as scan:
                    for entry in scan:
                        seen += 1
                        path = f"{where}/{entry.name}" if where else entry.name
                        if entry.is_symlink():
                            try:
                                info = entry.stat(follow_symlinks=False)
                            except OSError:
                                continue  # gone as it was looked at
                            found.add((path, info.st_dev, info.st_ino))
                        elif below and entry.is_dir(follow_symlinks=False):
                            pending.append(path)
            finally:
                os.close(fd)
    return frozenset(found)


def _link_aside(git: int, link: str, *, found: bool = False) -> list[str]:
    """Move the link `link` (relative to `.git`) aside; what to say of it."""
    return _aside(git, link, ".git/", found=found)


def _aside(base: int, path: str, shown: str, *, found: bool = False) -> list[str]:
    """Move `path` (relative to `base`, shown after `shown`) aside, reaching its directory
    without following a link; what to say of it."""
    *dirs, name = path.split("/")
    try:
        parent = _open_dir(base, "/".join(dirs))
    except OSError:
        return []
    try:
        return _move_aside(parent, name, f"{shown}{path}", found=found)
    finally:
        os.close(parent)


_FOUND: Final = "the run found {shown} as it started (left by something that outlived a sweep)"
"""How a note names an entry the plan moved aside, not one the command made."""


def _move_aside(parent: int, name: str, shown: str, *, found: bool = False) -> list[str]:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return []
    except OSError as error:
        return [f"bastion: {shown} could not be checked after the command: {error}"]
    aside = f"{name}.refused-{secrets.token_hex(4)}"
    where = shown[: len(shown) - len(name)] + aside
    made = _FOUND.format(shown=shown) if found else f"the command made {shown}"
    try:
        os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as error:
        return [f"bastion: {made}, which could not be moved aside: {error}"]
    return [
        f"bastion: {made}, one of git's control files, which git on the host would follow "
        f"outside any sandbox: it was moved aside to {where} ({_SWITCH})"
    ]


@contextlib.contextmanager
def _guard(workspace: Path) -> Iterator[GitGuard]:
    made = GitGuard()
    try:
        try:
            made.plan(workspace)
        except OSError as error:
            raise SandboxFailed(
                f"the workspace's git control files could not be checked or made empty "
                f"({error.strerror}: {error.filename}): let the sandbox service write the "
                f"workspace's .git, or {_SWITCH}"
            ) from None
        yield made
    finally:
        made.close()


def guard(workspace: Path, writable: bool) -> contextlib.AbstractContextManager[GitGuard | None]:
    """The protection of `workspace`'s git for one run, its descriptors closed on exit;
    none when the operator lets commands write git's control files (`writable`)."""
    return contextlib.nullcontext() if writable else _guard(workspace)
