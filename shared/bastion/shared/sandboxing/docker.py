"""The Docker backend: one container per session, started on first use, one `exec` per call
and one per background task (under its reaper, `docker_task`).

A container runs as the workspace's owner with no capabilities, no new privileges, a
read-only root, a private `/tmp` tmpfs, the workspace at `/workspace`, and the limits of
`ContainerLimits` plus a command's CPU seconds and file size (as `ulimit`s: Docker has no
per-process address-space limit, the container's memory limit stands in for it). Unless
the operator lets commands write them (`git_writable`), git's control files in the
workspace are mounted as bubblewrap binds them (`gitguard`): a hook or config written by a
command would run later, outside any sandbox, when a person uses git. The engine mounts
host paths, so once a container runs each such mount is checked to show the file that
was checked (device and inode), and the container is not used otherwise. Its init
is a shell loop: as the namespace's pid 1 it outlives `kill -9 -1` and reaps orphans.

A call whose wall clock runs out ends with `kill -9 -1` run in the container as its user:
every process of the session but the init goes, background ones of earlier calls too, and
so does one that left the call's process group. Should that not end the call (a fork bomb
leaves no process free to run `kill`), the container is removed; the next call gets a new
one. Containers are labelled with their owner and session, so a restarted service removes
what its previous life left (`DockerSandboxes.sweep`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

import anyio
import anyio.to_thread
import msgspec

from bastion.proto._base import MAX_TEXT
from bastion.proto.sandbox import ExecResult, Limits
from bastion.shared.errors import InvalidInput, NotImplementedYet
from bastion.shared.sandboxing.argv import ENVIRONMENT, shell_argv
from bastion.shared.sandboxing.docker_engine import (
    LABEL_MANAGED,
    ContainerConfig,
    DockerEngine,
    ReadOnlyMount,
    engine_address,
)
from bastion.shared.sandboxing.docker_target import DOCKER_PREFIX, DockerTarget
from bastion.shared.sandboxing.docker_task import DockerTask, TaskPump, reaper_argv
from bastion.shared.sandboxing.errors import SandboxFailed
from bastion.shared.sandboxing.gitguard import GitGuard, guard
from bastion.shared.sandboxing.output import CappedOutput, OutputTap, capped_pair
from bastion.shared.sandboxing.process import DRAIN_GRACE_S
from bastion.shared.sandboxing.spec import WORKSPACE, SandboxSpec

__all__ = [
    "LABEL_OWNER",
    "LABEL_SESSION",
    "ContainerLimits",
    "DockerBackend",
    "DockerSandboxes",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

LABEL_OWNER: Final = "io.bastion.owner"
LABEL_SESSION: Final = "io.bastion.session"
LABEL_INSTANCE: Final = "io.bastion.instance"
LABEL_CONFIG: Final = "io.bastion.config"

INIT: Final = ("/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done")
"""The container's pid 1: it survives `kill -9 -1` from inside and reaps every orphan."""

KILL_ALL: Final = ("/bin/sh", "-c", "kill -9 -1")
_KILL_S: Final = 20.0
"""How long a cancelled exec's `KILL_ALL` may take before the cancel goes on without it."""
_CONTROL_DEADLINE_S: Final = 60.0
_TASK_READY_S: Final = 30.0
"""How long a task's reaper may take to say it started the command."""
_CHECK_LIMITS: Final = Limits(wall_s=30.0, cpu_s=10)
_SIGNAL_STATUSES: Final = range(129, 129 + 64)


@dataclass(frozen=True)
class ContainerLimits:
    """What a session's container may use in all, besides each command's `Limits`."""

    memory_bytes: int = 4 * GiB
    pids: int = 256
    cpus: float = 2.0
    tmp_bytes: int = 256 * MiB


class _Gone(Exception):
    """The session's container went away between being found and being used."""


@dataclass
class _Container:
    id: str
    config: str


def _owner(workspace: Path) -> tuple[int, int]:
    """The uid and gid the workspace belongs to: the container's user."""
    info = workspace.stat()
    if info.st_uid == 0:
        raise InvalidInput(
            f"the workspace {workspace} belongs to root, and the Docker sandbox runs commands "
            "as the workspace's owner, never as root: give a workspace owned by an "
            "unprivileged user (chown it)"
        )
    return info.st_uid, info.st_gid


def _git_protection(workspace: Path, git: GitGuard | None) -> tuple[ReadOnlyMount, ...]:
    """Git's control entries as `gitguard` checked them, mounted at their paths.

    Docker mounts a host path, not a descriptor: `_check_git_mounts` proves, once the
    container runs, that each mount shows the very file checked.
    """
    if git is None:
        return ()
    return tuple(
        ReadOnlyMount(f"{WORKSPACE}/{bind.path}", str(workspace / bind.path), bind.writable)
        for bind in git.binds
    )


def _identity(git: GitGuard | None) -> str:
    """What the mounts bind, down to the inodes: a `.git` made or replaced since the
    container started gets a new container, protected, on the next call."""
    if git is None:
        return "-"
    return ",".join(f"{path}@{dev}:{ino}" for path, dev, ino in git.identity())


def _with_notes(result: ExecResult, notes: list[str]) -> ExecResult:
    """`result` with what the git sweep did added to its error output."""
    if not notes:
        return result
    stderr = result.stderr + "".join(f"\n{note}" for note in notes)
    return msgspec.structs.replace(result, stderr=stderr)


def _result(
    code: int | None, timed_out: bool, out: CappedOutput, err: CappedOutput, took: float
) -> ExecResult:
    """How an exec ended, read as bubblewrap's results are: 129-192 is signal N-128."""
    ended: str = "exited"
    signum: int | None = None
    status = 128 + int(signal.SIGKILL) if code is None else code
    if timed_out:
        ended, signum, status = "timeout", int(signal.SIGKILL), 128 + int(signal.SIGKILL)
    elif status in _SIGNAL_STATUSES:
        ended, signum = "signal", status - 128
    return ExecResult(
        exit_status=status,
        ended=ended,  # type: ignore[arg-type]
        signal=signum,
        stdout=out.text(),
        stderr=err.text(),
        stdout_cut=out.cut,
        stderr_cut=err.cut,
        duration_s=round(took, 3),
    )


class DockerSandboxes:
    """The containers of every session this service instance runs on one engine.

    `owner` names whose containers these are: at start, `sweep` removes every container of
    the same owner, since a service that has just started holds none yet. Several sandbox
    service instances sharing one engine each need an owner of their own.
    """

    def __init__(
        self,
        owner: str,
        limits: ContainerLimits | None = None,
        engine: DockerEngine | None = None,
    ) -> None:
        self.owner = owner
        self.instance = secrets.token_hex(6)
        self.limits = limits or ContainerLimits()
        self._engine = engine or DockerEngine()
        self._containers: dict[str, _Container] = {}
        self._removed: set[str] = set()
        """Containers an exec removed (its command outlived its time): the next call of
        their session makes a new one instead of an exec the engine would refuse."""
        self._image_ids: dict[str, str] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._streams = anyio.CapacityLimiter(256)
        self._busy: dict[str, int] = {}
        """How many commands and tasks run in each container."""
        self._used = False

    def backend(self, target: DockerTarget) -> DockerBackend:
        """A backend running commands in images like `target`'s, with these containers."""
        return DockerBackend(self, target)

    async def call(self, function: Callable[[], T], deadline_s: float = _CONTROL_DEADLINE_S) -> T:
        """Run one blocking engine call in a worker thread, within `deadline_s`."""
        try:
            with anyio.fail_after(deadline_s):
                return await anyio.to_thread.run_sync(function, abandon_on_cancel=True)
        except TimeoutError:
            raise SandboxFailed(
                f"the Docker engine at {engine_address()} did not answer within "
                f"{deadline_s:g} s: check that it runs and is not overloaded"
            ) from None

    async def version(self) -> str:
        """The engine's version, or `SandboxFailed` saying where it was looked for."""
        return await self.call(self._engine.ping, deadline_s=10)

    async def sweep(self) -> int:
        """Remove every container of this owner (what an earlier run left); how many."""
        found = await self.call(
            partial(self._engine.containers, {LABEL_MANAGED: "true", LABEL_OWNER: self.owner})
        )
        for container_id in found:
            await self.call(partial(self._engine.remove, container_id))
        if found:
            logger.info("removed leftover sandbox containers", extra={"count": len(found)})
        return len(found)

    async def release(self, session_id: str) -> int:
        """Remove the session's container(s); how many. Nothing to do if never used."""
        self._containers.pop(session_id, None)
        if not self._used:
            return 0
        labels = {LABEL_MANAGED: "true", LABEL_OWNER: self.owner, LABEL_SESSION: session_id}
        found = await self.call(partial(self._engine.containers, labels))
        for container_id in found:
            await self.call(partial(self._engine.remove, container_id))
        return len(found)

    async def aclose(self) -> None:
        """Close the engine's connections (containers stay: `release` or `sweep` ends them)."""
        await self.call(self._engine.close, deadline_s=10)

    async def image_id(self, target: DockerTarget) -> str:
        """The ID of the image `target` pins, or an error saying how to make it available."""
        engine = self._engine
        found = await self.call(partial(engine.image, target.reference))
        if found is None or target.reference not in found.repo_digests:
            found = await self.call(partial(engine.image, target.digest))
            if found is not None and found.id != target.digest:
                found = None
        if found is None:
            raise SandboxFailed(
                f"the image {target.reference} is not on the Docker engine at "
                f"{engine_address()}, and Bastion never pulls one during a call: load or "
                f"import it first (`docker pull {target.reference}` ahead of time, or "
                f"`docker load`/`docker import` of an image whose ID is {target.digest})"
            )
        return found.id

    async def _check_network(self, target: DockerTarget) -> None:
        if target.network == "none":
            return
        if not await self.call(partial(self._engine.network_exists, target.network)):
            raise InvalidInput(
                f"there is no Docker network {target.network!r} on the engine at "
                f"{engine_address()}: create it (`docker network create --internal "
                f"{target.network}`, or one routed through a filtering proxy) or use `none`"
            )

    async def container(
        self, target: DockerTarget, spec: SandboxSpec, session_id: str, git: GitGuard | None
    ) -> str:
        """The running container of `session_id` for `spec`, started if there is none,
        its git control entries those `git` checked."""
        lock = self._locks.setdefault(session_id, anyio.Lock())
        async with lock:
            self._used = True
            held = self._containers.get(session_id)
            if held is not None and held.id in self._removed:
                self._removed.discard(held.id)
                del self._containers[session_id]
                held = None
            # A held container's image is the one its session found: a pinned reference
            # names one image, so it is looked up again only to make a container.
            image = self._image_ids.get(target.reference) if held is not None else None
            if image is None:
                image = await self.image_id(target)
                self._image_ids[target.reference] = image
            config = self._config(target, image, spec, session_id, git)
            if held is not None:
                if held.config == config.labels[LABEL_CONFIG]:
                    # No inspection first: an exec in a container that stopped or went is
                    # refused (`_Gone`), and the call then makes a new one.
                    return held.id
                del self._containers[session_id]
                await self.call(partial(self._engine.remove, held.id))
            await self._check_network(target)
            container_id = await self.call(partial(self._engine.create, config))
            try:
                await self._check_git_mounts(container_id, config.user, git)
            except SandboxFailed:
                await self.call(partial(self._engine.remove, container_id))
                raise
            self._containers[session_id] = _Container(container_id, config.labels[LABEL_CONFIG])
            return container_id

    async def _check_git_mounts(self, container_id: str, user: str, git: GitGuard | None) -> None:
        """Each git mount shows the file `git` checked (same device and inode), or the
        container is not used: a host path that changed between check and mount."""
        if git is None or not git.binds:
            return
        wanted = git.identity()
        paths = " ".join(f"'{WORKSPACE}/{path}'" for path, _, _ in wanted)
        seen = await self.exec(container_id, user, f"stat -c '%d %i' {paths}", _CHECK_LIMITS)
        expected = "".join(f"{dev} {ino}\n" for _, dev, ino in wanted)
        if seen.exit_status == 127:
            raise SandboxFailed(
                "the container cannot show what its git mounts are (no `stat` in the image): "
                "use an image with coreutils or busybox, or set BASTION_GIT_WRITABLE=true"
            )
        if seen.exit_status != 0 or seen.stdout != expected:
            raise SandboxFailed(
                "the workspace's git control files changed while the container was being "
                "made, so it was not used: try the call again"
            )

    def forget(self, session_id: str, container_id: str) -> None:
        """Drop a container from the map if it is still the session's."""
        held = self._containers.get(session_id)
        if held is not None and held.id == container_id:
            del self._containers[session_id]

    async def discard(self, session_id: str, container_id: str) -> None:
        """Forget a container an exec found stopped or gone, and remove what is left of it."""
        self.forget(session_id, container_id)
        with anyio.CancelScope(shield=True):
            await self.call(partial(self._engine.remove, container_id))

    def _config(
        self,
        target: DockerTarget,
        image_id: str,
        spec: SandboxSpec,
        session_id: str,
        git: GitGuard | None,
    ) -> ContainerConfig:
        uid, gid = _owner(spec.workspace)
        protected = _git_protection(spec.workspace, git)
        # The operator's extra read-only directories, each at its own path, as bubblewrap
        # shows them; checked by the sandbox service before a spec is made.
        shown = tuple(ReadOnlyMount(str(path), str(path)) for path in spec.read_only)
        fingerprint = (
            f"{image_id} {target.network} {spec.workspace} {uid}:{gid} "
            f"{spec.limits.cpu_s} {spec.limits.file_size_bytes} {_identity(git)} "
            f"{' '.join(m.target for m in shown)}"
        )
        return ContainerConfig(
            image_id=image_id,
            command=INIT,
            user=f"{uid}:{gid}",
            workspace=str(spec.workspace),
            workdir=WORKSPACE,
            environment=dict(ENVIRONMENT),
            network=target.network,
            labels={
                LABEL_MANAGED: "true",
                LABEL_OWNER: self.owner,
                LABEL_INSTANCE: self.instance,
                LABEL_SESSION: session_id,
                LABEL_CONFIG: hashlib.sha256(fingerprint.encode()).hexdigest()[:16],
            },
            memory_bytes=self.limits.memory_bytes,
            pids=self.limits.pids,
            nano_cpus=int(self.limits.cpus * 1e9),
            tmp_bytes=self.limits.tmp_bytes,
            cpu_s=spec.limits.cpu_s,
            file_size_bytes=spec.limits.file_size_bytes,
            read_only=shown + protected,
        )

    @contextlib.contextmanager
    def _running(self, container_id: str) -> Iterator[None]:
        """Count a command or a task as running in the container for the block."""
        self._busy[container_id] = self._busy.get(container_id, 0) + 1
        try:
            yield
        finally:
            self._busy[container_id] -= 1
            if not self._busy[container_id]:
                del self._busy[container_id]

    def idle(self, container_id: str) -> bool:
        """Whether no command or task of this service runs in the container."""
        return container_id not in self._busy

    async def exec(
        self,
        container_id: str,
        user: str,
        command: str,
        limits: Limits,
        tap: OutputTap | None = None,
    ) -> ExecResult:
        """Run `command` in the container as `user`, within `limits.wall_s`; how it ended.
        Each chunk of its output is also given to `tap` (from the thread that reads it)."""
        with self._running(container_id):
            return await self._exec(container_id, user, command, limits, tap)

    async def _exec(
        self,
        container_id: str,
        user: str,
        command: str,
        limits: Limits,
        tap: OutputTap | None,
    ) -> ExecResult:
        engine = self._engine
        cap = min(limits.output_bytes, MAX_TEXT - 64)
        out, err = capped_pair(cap, tap)
        started = time.monotonic()
        exec_id = await self.call(
            partial(engine.exec_create, container_id, shell_argv(command), user)
        )
        if exec_id is None:
            raise _Gone
        output = await self.call(partial(engine.exec_start, exec_id))
        failed: list[SandboxFailed] = []

        def pump() -> None:
            try:
                for chunk_out, chunk_err in output.chunks():
                    if chunk_out:
                        out.feed(chunk_out)
                    if chunk_err:
                        err.feed(chunk_err)
            except SandboxFailed as error:
                failed.append(error)

        timed_out = False
        try:
            async with anyio.create_task_group() as group:

                async def read() -> None:
                    await anyio.to_thread.run_sync(
                        pump, abandon_on_cancel=True, limiter=self._streams
                    )
                    group.cancel_scope.cancel()

                group.start_soon(read)
                await anyio.sleep(limits.wall_s)
                timed_out = True
                await self.kill_all(container_id, user)
                await anyio.sleep(DRAIN_GRACE_S)
                # Nothing could run `kill` (a fork bomb), or the engine is stuck: end it all.
                logger.warning("sandbox container removed: its command outlived its time")
                output.close()
                self._removed.add(container_id)
                await self.call(partial(engine.remove, container_id))
                group.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # The call was cancelled (`bastion.shared.cancelling`): the exec'd command ends
            # as one whose time ran out does, with every process of it.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_S):
                await self.kill_all(container_id, user)
            raise
        finally:
            output.close()
        if failed:
            raise failed[0]
        code = None if timed_out else await self._exit_code(exec_id)
        return _result(code, timed_out, out, err, time.monotonic() - started)

    async def _exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code: the engine may record it a moment after its output ends."""
        with anyio.move_on_after(5):
            while True:
                code = await self.call(partial(self._engine.exec_exit_code, exec_id))
                if code is not None:
                    return code
                await anyio.sleep(0.01)
        return None

    async def kill_all(self, container_id: str, user: str) -> None:
        """Every process of the container but its init, killed by one of the same user."""
        await self.control(container_id, user, KILL_ALL)

    async def control(self, container_id: str, user: str, argv: Sequence[str]) -> None:
        """Run a short control command (a kill) in the container, to its end or for 10 s;
        one that fails is let be: its caller removes the container if what it was for
        does not end."""
        engine = self._engine
        try:
            runner = await self.call(partial(engine.exec_create, container_id, argv, user), 10)
            if runner is not None:
                done = await self.call(partial(engine.exec_start, runner), 10)
                try:
                    await self.call(lambda: list(done.chunks()), 10)
                finally:
                    done.close()
        except SandboxFailed:
            pass

    @property
    def streams(self) -> anyio.CapacityLimiter:
        """The threads reading exec output: one per running command or task."""
        return self._streams

    def gone(self, container_id: str) -> bool:
        """Whether an exec (or a task's stop) removed the container."""
        return container_id in self._removed

    async def exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code, once the engine has it (None: it lost the exec)."""
        return await self._exit_code(exec_id)

    async def remove_stuck(self, container_id: str) -> None:
        """Remove a container whose processes could not be killed from inside (a fork
        bomb): its session's next call makes a new one."""
        logger.warning("sandbox container removed: a background task could not be stopped")
        self._removed.add(container_id)
        with anyio.CancelScope(shield=True):
            await self.call(partial(self._engine.remove, container_id))

    async def start_task(
        self,
        target: DockerTarget,
        spec: SandboxSpec,
        command: str,
        output: int,
        cwd: str = "",
    ) -> DockerTask:
        """Start `command` as a background task in the session's container (made if it has
        none), under its reaper, in `/workspace/cwd`, both streams written to `output`, with
        no wall clock (its caller keeps one).

        Raises:
            SandboxFailed: there is no session, or the task could not start (the image
                has no `python3`, the container went).
        """
        if not spec.session_id:
            raise SandboxFailed(
                "background tasks run in a session's container, and this call has no "
                "session: open a session first"
            )
        uid, gid = _owner(spec.workspace)
        user = f"{uid}:{gid}"
        kept = contextlib.ExitStack()
        try:
            git = kept.enter_context(guard(spec.workspace, spec.git_writable))
            if git is not None and git.repository:
                raise NotImplementedYet(
                    "background tasks in a Docker session run only in a workspace that is no "
                    "repository: a task runs past the sweep of .git that ends each command, "
                    "and a container cannot show .git read-only to one exec; run it with "
                    "shell, or open the session with the bwrap backend"
                )
            workdir = f"{WORKSPACE}/{cwd}" if cwd else WORKSPACE
            for _ in range(2):  # once more should the container have gone meanwhile
                container_id = await self.container(target, spec, spec.session_id, git)
                exec_id = await self.call(
                    partial(
                        self._engine.exec_create, container_id, reaper_argv(command), user, workdir
                    )
                )
                if exec_id is not None:
                    break
                await self.discard(spec.session_id, container_id)
            else:
                raise SandboxFailed(
                    "the session's Docker container stopped as soon as it started: check the "
                    f"engine's log for container events of session {spec.session_id}"
                )
            kept.enter_context(self._running(container_id))
            reading = await self.call(partial(self._engine.exec_start, exec_id))
            pump = TaskPump(reading, os.dup(output))
            kept.callback(pump.close)
            reaper = await self.call(pump.reading(pump.until_started), deadline_s=_TASK_READY_S)
            if reaper is None:
                raise SandboxFailed(await self._not_started(exec_id, pump))
        except BaseException:
            kept.close()
            raise
        return DockerTask(
            self,
            container_id=container_id,
            user=user,
            exec_id=exec_id,
            pump=pump,
            reaper=reaper,
            git=git,
            kept=kept,
        )

    async def _not_started(self, exec_id: str, pump: TaskPump) -> str:
        """Why the reaper did not start the task, as a sentence saying what to do."""
        if await self._exit_code(exec_id) in (126, 127):  # the engine's "cannot run it"
            return (
                "background tasks in a Docker session run under a small Python reaper, and "
                "the image has no `python3` on its PATH that runs: use an image with python3"
            )
        said = pump.control.decode(errors="replace").strip()[:300]
        return f"the task's reaper did not start it ({said or 'it said nothing'}): start it again"


class DockerBackend:
    """Runs commands in the session's container of one pinned image, on one network."""

    def __init__(self, sandboxes: DockerSandboxes, target: DockerTarget) -> None:
        self._sandboxes = sandboxes
        self.target = target
        self.name = DOCKER_PREFIX + target.reference

    async def run(self, spec: SandboxSpec, command: str) -> ExecResult:
        """Run `command` with `/bin/sh -c` in `/workspace` of the session's container."""
        session_id = spec.session_id or "once-" + secrets.token_hex(8)
        try:
            for _ in range(2):  # once more should the container have gone meanwhile
                uid, gid = _owner(spec.workspace)
                with guard(spec.workspace, spec.git_writable) as git:
                    try:
                        container_id = await self._sandboxes.container(
                            self.target, spec, session_id, git
                        )
                        try:
                            result = await self._sandboxes.exec(
                                container_id, f"{uid}:{gid}", command, spec.limits, spec.tap
                            )
                        except _Gone:
                            await self._sandboxes.discard(session_id, container_id)
                            continue
                    finally:  # a cancelled or failed run is swept too
                        notes = git.sweep() if git is not None else []
                    return _with_notes(result, notes)
            raise SandboxFailed(
                "the session's Docker container stopped as soon as it started: check the "
                f"engine's log for container events of session {session_id}"
            )
        finally:
            if not spec.session_id:
                await self._sandboxes.release(session_id)

    async def start_task(
        self, spec: SandboxSpec, command: str, output: int, cwd: str = ""
    ) -> DockerTask:
        """Start `command` as a background task in the session's container
        (`DockerSandboxes.start_task`)."""
        return await self._sandboxes.start_task(self.target, spec, command, output, cwd)

    async def check(self, spec: SandboxSpec) -> str:
        """Run `true` in a throwaway container like the session's; say what ran."""
        quick = SandboxSpec(workspace=spec.workspace, limits=_CHECK_LIMITS, hidden=spec.hidden)
        version = await self._sandboxes.version()
        result = await self.run(quick, "true")
        if result.ended != "exited" or result.exit_status != 0:
            raise SandboxFailed(
                f"the Docker container started but `true` did not succeed in it (ended "
                f"{result.ended}, status {result.exit_status}): check that the image "
                f"{self.target.reference} has /bin/sh"
            )
        uid, _ = _owner(spec.workspace)
        return (
            f"Docker {version}, image {self.target.reference}: `true` ran as uid {uid} in "
            f"{WORKSPACE}, network {self.target.network}"
        )
