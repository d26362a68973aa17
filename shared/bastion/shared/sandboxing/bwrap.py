"""The bubblewrap backend: a fresh sandbox per command, and what its exit status means.

A command runs as uid 10001 inside, which is an unprivileged host user outside, never
host root (`hostids`): when the service is root it drops to the session's host user
(the operator's `BASTION_SANDBOX_HOST_UID`/`_GID`, else the workspace's owner) with
`setpriv` right before bwrap, after joining the cgroup and setting the limits; a service
that is not root runs bwrap as itself. So what a command writes in the workspace belongs,
on the host, to that user, a setuid bit it sets gives at most that user's ids, and a
root-only host file a bind shows stays unreadable. bubblewrap reports a command killed by
a signal as status 128+N, as a shell does; a status from 129 to 192 is therefore read as
signal N (a command that itself exits with such a status reads the same). A run whose
wall clock ran out ends `timeout` with SIGKILL's status: 137, signal 9.

Each command runs in a cgroup of its own when the service may make one (`cgroup`), which
bounds its processes and memory and says which bound it hit; otherwise `RLIMIT_NPROC` is
the fallback (it counts every process of the host user). Nested user namespaces are
refused (`--disable-userns`): a command cannot map itself root in a namespace of its own.
No bwrap process is inside the sandbox (`--as-pid-1`, `argv.PID_ONE`).

Given a state dir, a command of a session runs in that session's warm sandbox (`warm`):
made at its first command, kept while the session lives (closed after `idle_s` unused),
its init starting each command with the same environment, limits, cgroup and git sweep
as a cold sandbox gives. A command with no session, or one arriving while its session's
sandbox is busy with another, runs in a cold sandbox of its own as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import anyio

from bastion.proto._base import MAX_TEXT
from bastion.proto.sandbox import ExecResult, Limits
from bastion.shared.sandboxing.argv import (
    ENVIRONMENT,
    PID_ONE,
    SKILL_ENVIRONMENT,
    bwrap_argv,
    filled_pipes,
    prlimit_argv,
    rlimits,
    secret_args,
    shell_argv,
)
from bastion.shared.sandboxing.bridge import BRIDGE_PROGRAM, BRIDGE_SCRIPT
from bastion.shared.sandboxing.cgroup import (
    DEFAULT_CPU_WEIGHT,
    CgroupRoot,
    CommandCgroup,
    find_cgroup_root,
    remove_stale,
)
from bastion.shared.sandboxing.errors import SandboxFailed
from bastion.shared.sandboxing.etc import DataFile, generated_etc
from bastion.shared.sandboxing.gitguard import GitGuard, guard
from bastion.shared.sandboxing.hostids import HostIds, drop_argv, sandbox_ids, unreachable_parent
from bastion.shared.sandboxing.pidone import PidOne
from bastion.shared.sandboxing.process import Finished, run_limited
from bastion.shared.sandboxing.spec import SANDBOX_UID, WORKSPACE, SandboxSpec
from bastion.shared.sandboxing.task import SandboxTask, WarmSandboxTask
from bastion.shared.sandboxing.warm import (
    INIT_PATH,
    CompiledInit,
    Shape,
    WarmPool,
    WarmSandbox,
    git_signature,
)

__all__ = ["BwrapBackend"]

logger = logging.getLogger(__name__)

_LAUNCHER_ENV: Final = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
"""bwrap's own environment: the service's (NATS credentials, settings) never reaches it."""

_CHECK_LIMITS: Final = Limits(wall_s=30.0, cpu_s=10)
_CHECK_COMMAND: Final = f"test -w {WORKSPACE} && test -x {WORKSPACE} || exit 3"
"""What a check runs: it succeeds once the sandbox's user may write the workspace."""
_NOT_WRITABLE: Final = 3
WARM_TMP_BYTES: Final = 256 * 1024 * 1024
"""The most a warm sandbox's `/tmp` holds, for the whole session (a tmpfs of that size;
a skill's script gets a fresh one of the same size for each run)."""
WARM_SHM_BYTES: Final = 64 * 1024 * 1024
"""The most a command's `/dev/shm` in a warm sandbox holds: a fresh tmpfs of that size for
each command, charged to its cgroup and freed when it ends."""
_PYTHON: Final = "/usr/bin/python3"
"""The machine's python3, which a warm sandbox's init runs with (standard library only)."""
_SIGNAL_STATUSES: Final = range(129, 129 + 64)
_USERNS_HINT: Final = (
    "check that bubblewrap runs for the sandbox's host user and that unprivileged user "
    "namespaces are enabled (sysctl user.max_user_namespaces above 0, "
    "kernel.unprivileged_userns_clone=1 where it exists, or an AppArmor profile that lets "
    "bwrap create them)"
)


@contextmanager
def _pipes(contents: list[bytes]) -> Iterator[list[tuple[int, int]]]:
    """Pipes already filled with `contents` and closed for writing (`filled_pipes`), and
    one empty pipe last (read end, write end); every end still open is closed on exit."""
    with filled_pipes(contents) as read_ends:
        read_end, write_end = os.pipe()
        try:
            yield [(fd, -1) for fd in read_ends] + [(read_end, write_end)]
        finally:
            os.close(read_end)
            os.close(write_end)


def _read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _reason(finished: Finished) -> str:
    """bwrap's (or prlimit's) own first line of complaint, for the operator."""
    for line in finished.stderr.text().splitlines():
        if line.strip():
            return line.strip()[:300]
    return f"it exited with status {finished.returncode} and said nothing"


_SIGNAL_LIMITS: Final = {int(signal.SIGXCPU): "cpu_time", int(signal.SIGXFSZ): "file_size"}


def _result(finished: Finished, limit_hit: str = "", notes: list[str] | None = None) -> ExecResult:
    status = finished.returncode
    ended: str = "exited"
    signum: int | None = None
    if finished.timed_out:
        ended, signum, status = "timeout", int(signal.SIGKILL), 128 + int(signal.SIGKILL)
    elif status < 0:
        ended, signum, status = "signal", -status, 128 - status
    elif status in _SIGNAL_STATUSES:
        ended, signum = "signal", status - 128
    stderr = finished.stderr.text()
    if notes:
        stderr += "".join(f"\n{note}" for note in notes)
    return ExecResult(
        exit_status=status,
        ended=ended,  # type: ignore[arg-type]
        signal=signum,
        stdout=finished.stdout.text(),
        stderr=stderr,
        stdout_cut=finished.stdout.cut,
        stderr_cut=finished.stderr.cut,
        duration_s=round(finished.duration_s, 3),
        limit_hit=limit_hit or _SIGNAL_LIMITS.get(signum or 0, ""),
    )


async def _ended(cgroup: CommandCgroup | None) -> str:
    """Which limit the command hit, read before its cgroup is killed and removed: no process
    of it is left to change the workspace once the git sweep runs (docs/sandbox.md)."""
    if cgroup is None:
        return ""
    hit = cgroup.limit_hit()
    with anyio.CancelScope(shield=True):
        await cgroup.aclose()
    return hit


def _guarded(spec: SandboxSpec) -> contextlib.AbstractContextManager[GitGuard | None]:
    """The workspace's git guard, or none when the workspace is not shown."""
    if spec.workspace_shown:
        return guard(spec.workspace, spec.git_writable)
    return contextlib.nullcontext(None)


def _ids(spec: SandboxSpec) -> HostIds | None:
    """The host user to run as: the spec's, else (a root service) the workspace's owner."""
    if spec.host_ids is not None:
        return spec.host_ids
    return sandbox_ids(spec.workspace, None, f"the workspace {spec.workspace}")


def _host_user(spec: SandboxSpec) -> str:
    ids = _ids(spec)
    if ids is None:
        return f"the service's own uid {os.geteuid()}"
    return f"host uid {ids.uid}, gid {ids.gid}"


def _who(spec: SandboxSpec) -> str:
    """What the sandbox's user must reach, for a sandbox that did not start."""
    return (
        f"; bwrap ran as {_host_user(spec)}, which must be able to reach the workspace and "
        "every directory bound into the sandbox (their parents searchable by it)"
    )


class BwrapBackend:
    """Runs each command in a new bubblewrap sandbox, with `prlimit` setting its limits.

    `cgroups` False skips the per-command cgroup even where one could be made;
    `cpu_weight` is every tenant's CPU weight, where the `cpu` controller is the service's.
    """

    name = "bwrap"

    def __init__(
        self,
        bwrap: str = "bwrap",
        prlimit: str = "prlimit",
        cgroups: bool = True,
        cpu_weight: int = DEFAULT_CPU_WEIGHT,
        setpriv: str = "setpriv",
        *,
        state_dir: Path | None = None,
        idle_s: float = 600.0,
    ) -> None:
        self.warm = WarmPool(state_dir, idle_s) if state_dir is not None else None
        self._init = CompiledInit(_PYTHON)
        self._bwrap = bwrap
        self._prlimit = prlimit
        self._setpriv = setpriv
        self._version: str | None = None
        self._found: tuple[str, str, str] | None = None
        self._cgroup_root: CgroupRoot | None = (
            find_cgroup_root(cpu_weight=cpu_weight) if cgroups else None
        )

    @property
    def bounds(self) -> str:
        """How a command's processes and memory are bounded here, in a few words."""
        if self._cgroup_root is None:
            return "RLIMIT_NPROC (no cgroup this service may write; not enforced for root)"
        return self._cgroup_root.describe()

    def remove_stale_cgroups(self) -> int:
        """Remove the empty cgroups a service process that is gone left (`remove_stale`)."""
        return remove_stale(self._cgroup_root) if self._cgroup_root is not None else 0

    def _cgroup(self, spec: SandboxSpec) -> CommandCgroup | None:
        if self._cgroup_root is None:
            return None
        try:
            return CommandCgroup(self._cgroup_root, spec.limits, spec.tenant)
        except OSError as error:
            raise SandboxFailed(
                f"could not make a cgroup for the command ({error.strerror}) under "
                f"{self._cgroup_root.describe()}: give the service a writable, delegated "
                "cgroup, or set BASTION_CGROUPS=false to fall back to RLIMIT_NPROC"
            ) from None

    def _programs(self) -> tuple[str, str, str]:
        """Where bwrap, prlimit and setpriv are: looked up on PATH once, and again only
        once one found is no longer there to run."""
        if self._found is not None and all(os.access(path, os.X_OK) for path in self._found):
            return self._found
        self._found = self._look_up()
        return self._found

    def _look_up(self) -> tuple[str, str, str]:
        bwrap = shutil.which(self._bwrap)
        if bwrap is None:
            raise SandboxFailed(
                f"bubblewrap is not installed here (no `{self._bwrap}` found): install the "
                "bubblewrap package, or set the service's bwrap path to where it is"
            )
        prlimit = shutil.which(self._prlimit)
        if prlimit is None:
            raise SandboxFailed(
                f"`{self._prlimit}`, which sets a sandbox's limits, is not installed here: "
                "install util-linux"
            )
        setpriv = shutil.which(self._setpriv)
        if setpriv is None:
            raise SandboxFailed(
                f"`{self._setpriv}`, which drops a sandbox to an unprivileged host user, is "
                "not installed here: install util-linux"
            )
        return bwrap, prlimit, setpriv

    async def _launch(
        self,
        spec: SandboxSpec,
        command: str | list[str],
        files: Sequence[DataFile] = (),
        fds: Sequence[int] = (),
    ) -> ExecResult:
        programs = self._programs()
        cgroup = self._cgroup(spec)
        try:
            with _guarded(spec) as git:
                try:
                    finished = await self._launch_in(
                        spec, command, programs, cgroup, git=git, files=files, fds=fds
                    )
                finally:  # a cancelled or failed run is ended and swept too
                    hit = await _ended(cgroup)
                    notes = git.sweep() if git is not None else []
            return _result(finished, hit, notes)
        finally:
            if cgroup is not None:
                with anyio.CancelScope(shield=True):
                    await cgroup.aclose()

    async def _launch_in(
        self,
        spec: SandboxSpec,
        command: str | list[str],
        programs: tuple[str, str, str],
        cgroup: CommandCgroup | None,
        *,
        git: GitGuard | None,
        files: Sequence[DataFile] = (),
        fds: Sequence[int] = (),
    ) -> Finished:
        bwrap, prlimit, setpriv = programs
        drop = drop_argv(setpriv, _ids(spec))
        data = [*generated_etc(spec.network), *files]
        environment = list(spec.secret_environment)
        shell = shell_argv(command) if isinstance(command, str) else command
        if spec.bridge is not None and isinstance(command, str):
            data.append(DataFile(BRIDGE_SCRIPT, BRIDGE_PROGRAM))
            environment += spec.bridge.environment()
            shell = spec.bridge.argv(command)
        contents = [file.content for file in data]
        secrets = secret_args(environment) if environment else b""
        if secrets:
            contents.append(secrets)
        with _pipes(contents) as pipes:
            *data_pipes, (status_read, status_write) = pipes
            args_fd = data_pipes.pop()[0] if secrets else None
            join = cgroup.join_argv() if cgroup else []
            limits = prlimit_argv(prlimit, spec.limits, nproc=cgroup is None)
            argv = (
                join
                + limits
                + drop
                + bwrap_argv(
                    bwrap,
                    spec,
                    shell,
                    status_fd=status_write,
                    data_fds=[
                        (read, file.path) for (read, _), file in zip(data_pipes, data, strict=True)
                    ],
                    args_fd=args_fd,
                    git_options=git.options(WORKSPACE) if git is not None else (),
                    marker=self.warm.marker if self.warm is not None else None,
                )
            )
            pid_one = PidOne(status_read)
            try:
                finished = await run_limited(
                    argv,
                    wall_s=spec.limits.wall_s,
                    output_bytes=min(spec.limits.output_bytes, MAX_TEXT - 64),
                    env=_LAUNCHER_ENV,
                    pass_fds=[read for read, _ in data_pipes]
                    + ([args_fd] if args_fd is not None else [])
                    + [status_write, *fds]
                    + (git.fds if git is not None else []),
                    pid_one=pid_one,
                    tap=spec.tap,
                )
                status = pid_one.said + _read_available(status_read)
            finally:
                pid_one.close()
        if b'"child-pid"' not in status:
            raise SandboxFailed(
                f"the bubblewrap sandbox did not start ({_reason(finished)}): {_USERNS_HINT}"
                + _who(spec)
            )
        return finished

    async def run_program(
        self, spec: SandboxSpec, argv: list[str], files: Sequence[DataFile], fds: Sequence[int]
    ) -> ExecResult:
        """Run `argv` (not a shell command) in a cold sandbox of its own, within
        `spec.limits`, with `files` written read-only inside and the descriptors `fds`
        inherited: how a `run_code` program runs, never in the session's warm sandbox
        (which shows the workspace)."""
        return await self._launch(spec, argv, files, fds)

    async def run(self, spec: SandboxSpec, command: str) -> ExecResult:
        """Run `command` with `/bin/sh -c` in `/workspace`, within `spec.limits`: in the
        session's warm sandbox when there is a session and a state dir, else a cold one."""
        if self.warm is None or not spec.session_id or self.warm.busy(Shape.of(spec)):
            return await self._launch(spec, command)
        return await self._run_warm(self.warm, spec, command)

    async def _run_warm(self, warm: WarmPool, spec: SandboxSpec, command: str) -> ExecResult:
        programs = self._programs()
        shape = Shape.of(spec)
        cgroup = self._cgroup(spec)
        try:
            with guard(spec.workspace, spec.git_writable) as git:
                sandbox = await self._warm_sandbox(warm, shape, spec, programs, git)
                if sandbox is not None:
                    notes = warm.note(spec.session_id)
                    try:
                        finished = await self._run_in(sandbox, spec, command, cgroup)
                    finally:  # a cancelled or failed run is ended and swept too
                        hit = await _ended(cgroup)
                        await warm.done(shape, sandbox)  # a sandbox gone is closed first
                        notes += git.sweep() if git is not None else []
            if sandbox is not None:
                return _result(finished, hit, notes)
        finally:
            if cgroup is not None:
                with anyio.CancelScope(shield=True):
                    await cgroup.aclose()
        # A cold sandbox says why as it always has (bwrap's complaint as the result, or the
        # same error), or runs the command.
        return await self._launch(spec, command)

    async def _warm_sandbox(
        self,
        warm: WarmPool,
        shape: Shape,
        spec: SandboxSpec,
        programs: tuple[str, str, str],
        git: GitGuard | None,
    ) -> WarmSandbox | None:
        """The session's warm sandbox, made if it has none (or its one ended or no longer
        shows the workspace's git); None when one could not be made."""
        sandbox = warm.take(shape, git_signature(git))
        await warm.close_retired()
        if sandbox is not None:
            return sandbox
        try:
            sandbox = await self._spawn(warm, spec, programs)
        except SandboxFailed as error:
            warm.spawn_failed(shape)
            logger.info("a warm sandbox did not start, the command runs cold: %s", error)
            return None
        except BaseException:
            warm.spawn_failed(shape)
            raise
        warm.add(shape, sandbox)
        return sandbox

    async def start_task(
        self, spec: SandboxSpec, command: str, output: int, cwd: str = ""
    ) -> SandboxTask:
        """Start `command` as a background task in the session's warm sandbox (made if it
        has none), beside its commands, in `/workspace/cwd`, with `spec.limits` but no wall
        clock (its caller keeps one), both streams written to `output`.

        Raises:
            SandboxFailed: there is no warm sandbox (no state dir or session) or the task
                could not start.
        """
        warm = self.warm
        if warm is None or not spec.session_id:
            raise SandboxFailed(
                "background tasks run in a session's warm sandbox, and this sandbox service "
                "has none (no state dir, or no session): run the service with a state dir"
            )
        programs = self._programs()
        shape = Shape.of(spec)
        kept = contextlib.ExitStack()
        cgroup = self._cgroup(spec)
        try:
            git = kept.enter_context(guard(spec.workspace, spec.git_writable))
            sandbox = await warm.for_task(
                shape, git_signature(git), lambda: self._spawn(warm, spec, programs)
            )
            payload = self._payload(spec, command, cgroup, cwd, task=True)
            cgroup_fds = cgroup.procs_fds() if cgroup is not None else []
            try:
                task = await sandbox.start_task(payload, cgroup_fds, output)
            finally:
                for fd in cgroup_fds:
                    os.close(fd)
        except BaseException:
            with anyio.CancelScope(shield=True):
                if cgroup is not None:
                    await cgroup.aclose()
                kept.close()
            raise
        return WarmSandboxTask(task, cgroup, kept)

    def _payload(
        self,
        spec: SandboxSpec,
        command: str,
        cgroup: CommandCgroup | None,
        cwd: str = "",
        *,
        task: bool = False,
    ) -> bytes:
        """What the init is sent to start `command` as `spec` says, in `/workspace/cwd`. A
        background `task` sees the workspace's `.git` read-only: it runs beside later
        commands, past the sweep that ends each of them (docs/git-protection.md), so what
        it could leave in `.git` no sweep would take back before host tools read it."""
        environment = list(ENVIRONMENT if spec.skill_dir is None else SKILL_ENVIRONMENT)
        environment += spec.secret_environment
        shell = shell_argv(command)
        if spec.bridge is not None:
            environment += spec.bridge.environment()
            shell = spec.bridge.argv(command)
        header = {
            "argv": [*PID_ONE, *shell],
            "cwd": f"{WORKSPACE}/{cwd}" if cwd else WORKSPACE,
            "limits": rlimits(spec.limits, nproc=cgroup is None),
            # a skill's script gets a /tmp (its HOME) of its own, as in a cold sandbox
            "fresh_tmp": f"mode=1777,size={WARM_TMP_BYTES}" if spec.skill_dir else "",
            "shm": f"mode=1777,size={WARM_SHM_BYTES}",
            "read_only": [f"{WORKSPACE}/.git"] if task else [],
        }
        block = b"".join(f"{name}={value}".encode() + b"\0" for name, value in environment)
        return json.dumps(header).encode() + b"\n" + block

    async def _run_in(
        self, sandbox: WarmSandbox, spec: SandboxSpec, command: str, cgroup: CommandCgroup | None
    ) -> Finished:
        """Have `sandbox`'s init run `command` as `spec` says."""
        cgroup_fds = cgroup.procs_fds() if cgroup is not None else []
        try:
            return await sandbox.run(
                self._payload(spec, command, cgroup),
                cgroup_fds,
                wall_s=spec.limits.wall_s,
                output_bytes=min(spec.limits.output_bytes, MAX_TEXT - 64),
                on_timeout=cgroup.kill if cgroup is not None else None,
                tap=spec.tap,
            )
        finally:
            for fd in cgroup_fds:
                os.close(fd)

    async def _spawn(
        self, warm: WarmPool, spec: SandboxSpec, programs: tuple[str, str, str]
    ) -> WarmSandbox:
        """A new warm sandbox like `spec`'s, its init ready for commands."""
        bwrap, _, setpriv = programs
        drop = drop_argv(setpriv, _ids(spec))
        why = f"{_USERNS_HINT}{_who(spec)}; a warm sandbox's init needs {_PYTHON}"
        program = await self._init.program(_LAUNCHER_ENV)
        data = [*generated_etc(spec.network), DataFile(INIT_PATH, program)]
        if spec.bridge is not None:
            data.append(DataFile(BRIDGE_SCRIPT, BRIDGE_PROGRAM))
        kept = contextlib.ExitStack()
        try:
            git = kept.enter_context(guard(spec.workspace, spec.git_writable))
            channel, inner = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            kept.callback(channel.close)
            inner_fd = inner.detach()
            with _pipes([file.content for file in data]) as pipes:
                *data_pipes, (_, status_write) = pipes
                init = [_PYTHON, "-I", "-S", "-B", INIT_PATH, str(inner_fd), warm.marker]
                argv = drop + bwrap_argv(
                    bwrap,
                    spec,
                    init,
                    status_fd=status_write,
                    data_fds=[
                        (read, file.path) for (read, _), file in zip(data_pipes, data, strict=True)
                    ],
                    git_options=git.options(WORKSPACE) if git is not None else (),
                    tmp_bytes=WARM_TMP_BYTES,
                    init=True,
                )
                sandbox = await WarmSandbox.start(
                    argv,
                    channel=channel,
                    inner=inner_fd,
                    pass_fds=[read for read, _ in data_pipes]
                    + [status_write, inner_fd]
                    + (git.fds if git is not None else []),
                    env=_LAUNCHER_ENV,
                    git=kept,
                    signature=git_signature(git),
                    pidfile=warm.pidfile(),
                    why=why,
                )
        except BaseException:
            kept.close()
            raise
        return sandbox

    async def prepare(self) -> None:
        """Compile the warm sandboxes' init now (`CompiledInit`), as the service starts, so
        its first session's first command does not wait for it; a python3 that cannot is
        logged, and each warm sandbox then fails to start as it would (its command runs
        cold)."""
        if self.warm is None:
            return
        try:
            await self._init.program(_LAUNCHER_ENV)
        except SandboxFailed as error:
            logger.info("warm sandboxes cannot start, commands run cold: %s", error)

    async def aclose(self) -> None:
        """Close every warm sandbox (and sweep what an earlier run left of them)."""
        if self.warm is not None:
            await self.warm.aclose()

    async def check(self, spec: SandboxSpec) -> str:
        """Run `true` in a sandbox like `spec`'s; say what ran, or raise `SandboxFailed`."""
        ids = _ids(spec)
        if ids is not None:
            for directory in (spec.workspace, *spec.read_only, *filter(None, [spec.skill_dir])):
                closed = unreachable_parent(directory, ids)
                if closed is not None:
                    raise SandboxFailed(
                        f"the sandbox's user (host uid {ids.uid}, gid {ids.gid}) cannot reach "
                        f"{directory}: {closed} does not let it through; put the directory "
                        f"where that user can reach it, or let it through (`chmod o+x {closed}`)"
                    )
        quick = dataclasses.replace(spec, limits=_CHECK_LIMITS)
        result = await self._launch(quick, _CHECK_COMMAND)
        if result.ended == "exited" and result.exit_status == _NOT_WRITABLE:
            raise SandboxFailed(
                f"the sandbox's user ({_host_user(spec)}) cannot write the workspace "
                f"{spec.workspace}: give it that user (`chown -R` it), or run the sandbox as "
                "the workspace's owner (unset BASTION_SANDBOX_HOST_UID/_GID)"
            )
        if result.ended != "exited" or result.exit_status != 0:
            raise SandboxFailed(
                f"the bubblewrap sandbox started but its check did not succeed in it "
                f"(ended {result.ended}, status {result.exit_status}): {_USERNS_HINT}"
            )
        return (
            f"{await self._describe()}: a check ran as uid {SANDBOX_UID} in {WORKSPACE} "
            f"({_host_user(spec)} on the host), network {spec.network}, processes and "
            f"memory bounded by {self.bounds}"
        )

    async def _describe(self) -> str:
        if self._version is None:
            bwrap = self._programs()[0]
            with anyio.move_on_after(10):
                done = await anyio.run_process([bwrap, "--version"], check=False)
                self._version = done.stdout.decode(errors="replace").strip() or bwrap
            if self._version is None:
                return bwrap
        return self._version
