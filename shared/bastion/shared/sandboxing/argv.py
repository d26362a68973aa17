"""The command line that starts a sandbox: `prlimit` for the limits, then `bwrap`."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from bastion.proto.sandbox import Limits
from bastion.shared.sandboxing.bridge import EGRESS_SOCKET
from bastion.shared.sandboxing.etc import host_etc_entries
from bastion.shared.sandboxing.spec import (
    SANDBOX_GID,
    SANDBOX_UID,
    SKILL_MOUNT,
    WORKSPACE,
    SandboxSpec,
)

__all__ = [
    "ALWAYS_HIDDEN",
    "ENVIRONMENT",
    "MASKED_PROC",
    "PID_ONE",
    "PROGRAM_DIRS",
    "SKILL_ENVIRONMENT",
    "bwrap_argv",
    "filled_pipes",
    "prlimit_argv",
    "rlimits",
    "secret_args",
    "shell_argv",
]

PROGRAM_DIRS: Final = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Top-level program directories: symlinks into `/usr` on a merged-usr system, else bound."""

PID_ONE: Final = ("/bin/sh", "-c", 'exec 9>&2 2>/dev/null; "$@" 2>&9 9>&-; exit $?', "bastion-init")
"""Pid 1 of the sandbox (`--as-pid-1`, so no bwrap process is inside for a command to
trace or read): a shell that runs the command as its child, then exits with its status
(128+N for signal N). The command is not pid 1 itself, so `kill $$` works as anywhere;
this shell's own complaints ("Terminated") go nowhere."""

MASKED_PROC: Final = ("/proc/keys", "/proc/key-users")
"""Kernel keyring listings, which show other sandboxes' keys of the same host user."""

ALWAYS_HIDDEN: Final = (Path("/etc/ssl/private"),)
"""Host paths masked whoever runs the sandbox (a second wall: its unprivileged host user
cannot read them anyway)."""

ENVIRONMENT: Final = (
    ("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"),
    ("HOME", WORKSPACE),
    ("LANG", "C.UTF-8"),
    ("TERM", "dumb"),
    ("TMPDIR", "/tmp"),
)
"""The whole environment a command starts with: nothing of the service's passes."""

SKILL_ENVIRONMENT: Final = (
    *((name, "/tmp" if name == "HOME" else value) for name, value in ENVIRONMENT),
    ("PYTHONNOUSERSITE", "1"),
    ("PYTHONSAFEPATH", "1"),
)
"""A skill's script's environment: its HOME is its own empty `/tmp`, not the workspace,
Python reads no user site-packages and puts no working directory first on its import path
(`python3 -m json.tool` in a script would import a `json/` the agent wrote in the
workspace), so nothing an agent wrote (a `.pth` under `.local/lib`, a module, a `.curlrc`,
a `.gitconfig`) runs or takes effect beside the secrets the script is leased."""


def shell_argv(command: str) -> list[str]:
    """How a command runs inside: one `/bin/sh -c`."""
    return ["/bin/sh", "-c", command]


def _within_hard_limit(value: int, which: int) -> int:
    """`value`, or less if this process may not grant as much (a user cannot raise its own
    hard limit, which a service manager may have set lower)."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def rlimits(limits: Limits, *, nproc: bool = False) -> dict[str, int | None]:
    """The per-process limits of a command, as `prlimit_argv` sets them (and a warm
    sandbox's init does): CPU soft and hard, address space, file size, and processes
    (None unless `nproc`).

    The CPU hard limit is one second past the soft one, so a process that runs out is
    first sent SIGXCPU (which says why) rather than a bare SIGKILL. With `nproc` (no cgroup
    to bound the command's processes) `RLIMIT_NPROC` is set too: it counts every process of
    the host user and is not enforced for root, so it is a fallback, not a bound.
    """
    cpu_hard = _within_hard_limit(limits.cpu_s + 1, resource.RLIMIT_CPU)
    return {
        "cpu_soft": min(limits.cpu_s, cpu_hard),
        "cpu_hard": cpu_hard,
        "address_space": _within_hard_limit(limits.address_space_bytes, resource.RLIMIT_AS),
        "file_size": _within_hard_limit(limits.file_size_bytes, resource.RLIMIT_FSIZE),
        "processes": limits.processes if nproc else None,
    }


def prlimit_argv(prlimit: str, limits: Limits, *, nproc: bool = False) -> list[str]:
    """`prlimit` setting the per-process limits (`rlimits`), inherited by bwrap and all it
    starts."""
    values = rlimits(limits, nproc=nproc)
    return [
        prlimit,
        f"--cpu={values['cpu_soft']}:{values['cpu_hard']}",
        f"--as={values['address_space']}",
        f"--fsize={values['file_size']}",
        *([f"--nproc={values['processes']}"] if nproc else []),
        "--",
    ]


def _program_dirs() -> list[str]:
    args: list[str] = []
    for directory in PROGRAM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    return args


def _masks(hidden: Sequence[Path], bound: Sequence[Path]) -> list[str]:
    """An empty read-only tmpfs over each hidden path that a bound tree would show."""
    args: list[str] = []
    for path in hidden:
        for source in bound:
            if path == source or path.is_relative_to(source):
                args += ["--tmpfs", str(path), "--remount-ro", str(path)]
                break
    return args


def bwrap_argv(
    bwrap: str,
    spec: SandboxSpec,
    command: Sequence[str],
    *,
    status_fd: int,
    data_fds: Sequence[tuple[int, str]],
    args_fd: int | None = None,
    git_options: Sequence[str] = (),
    tmp_bytes: int | None = None,
    init: bool = False,
    marker: str | None = None,
) -> list[str]:
    """bwrap's arguments for `spec`, running `command` as uid 10001 in `/workspace`.

    bwrap runs as whoever starts it (`hostids.drop_argv` before it): uid 10001 is that
    host user, never host root.

    `args_fd`, when given, is a pipe of further options (`secret_args`) read last.
    `git_options` bind the workspace's git control files by descriptor (`gitguard`),
    right after the workspace itself.

    `status_fd` receives bwrap's JSON status (its `child-pid` line proves the sandbox
    started); each `(fd, path)` of `data_fds` is a pipe whose content bwrap writes,
    read-only, at `path`.
    """
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
    ]
    if spec.network == "host":
        args.append("--share-net")
    args += [
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--cap-drop",
        "ALL",
        *(["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"] if init else []),
        "--json-status-fd",
        str(status_fd),
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    args += _program_dirs()
    args += ["--perms", "0755", "--dir", "/etc"]
    etc_entries = host_etc_entries(spec.network)
    for name in etc_entries:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for fd, path in data_fds:
        args += ["--perms", "0644", "--ro-bind-data", str(fd), path]
    args += ["--proc", "/proc"]
    if not init:
        # Read-only /proc/sys as a second wall: the sandbox's uid is an unprivileged host
        # user, and were it ever root a writable /proc/sys would set the host's sysctls.
        # (A warm sandbox's init masks each command's own /proc the same way: the kernel
        # lets it mount one only while the sandbox's is not masked.)
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        for path in MASKED_PROC:
            args += ["--ro-bind", "/dev/null", path]
    args += [
        "--dev",
        "/dev",
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        *(["--size", str(tmp_bytes)] if tmp_bytes is not None else []),
        "--tmpfs",
        "/tmp",
        *(["--bind", str(spec.workspace), WORKSPACE] if spec.workspace_shown else []),
    ]
    args += git_options
    for directory in spec.read_only:
        args += ["--ro-bind", str(directory), str(directory)]
    if spec.bridge is not None:
        args += ["--ro-bind", str(spec.bridge.socket), EGRESS_SOCKET]
    if spec.skill_dir is not None:
        args += ["--ro-bind", str(spec.skill_dir), SKILL_MOUNT]
    skill = (spec.skill_dir,) if spec.skill_dir is not None else ()
    bound = [Path("/usr"), *(Path("/etc") / name for name in etc_entries), *spec.read_only, *skill]
    args += _masks((*spec.hidden, *ALWAYS_HIDDEN), bound)
    home = WORKSPACE if spec.workspace_shown else "/tmp"
    args += ["--remount-ro", "/", "--chdir", home, "--clearenv"]
    own_home = spec.skill_dir is None and spec.workspace_shown
    environment = ENVIRONMENT if own_home else SKILL_ENVIRONMENT
    for name, value in environment:
        args += ["--setenv", name, value]
    if args_fd is not None:
        # More options (the secrets' --setenv) read from a pipe: never on the command line.
        args += ["--args", str(args_fd)]
    pid_one = PID_ONE if marker is None else (*PID_ONE[:-1], marker)
    return [*args, "--", *(() if init else pid_one), *command]


def secret_args(environment: Sequence[tuple[str, str]]) -> bytes:
    """bwrap's `--setenv NAME VALUE` for each secret, NUL-separated, for `--args FD`."""
    parts: list[str] = []
    for name, value in environment:
        parts += ["--setenv", name, value]
    return b"".join(part.encode() + b"\0" for part in parts)


@contextmanager
def filled_pipes(contents: list[bytes]) -> Iterator[list[int]]:
    """A pipe per content, already written and closed for writing: their read ends (the
    `data_fds` and `args_fd` of `bwrap_argv`), closed on exit (the child has its own copies
    by then). Generated files are a few hundred bytes, secrets' options at most ~50 KiB
    (12 values of 4 KiB): below a pipe's 64 KiB buffer, so writing never blocks."""
    read_ends: list[int] = []
    try:
        for content in contents:
            read_end, write_end = os.pipe()
            read_ends.append(read_end)
            with os.fdopen(write_end, "wb") as writer:
                writer.write(content)
        yield read_ends
    finally:
        for fd in read_ends:
            os.close(fd)
