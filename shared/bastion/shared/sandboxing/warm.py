"""Warm bubblewrap sandboxes: one long-lived sandbox per session, its init driven over a
socket inherited at spawn (`warm_init`), and the sweep that ends every one this state
dir's service started (docs/architecture.md §5; docs/sandbox.md, "A warm sandbox per
session", says why each part is as it is).

A sandbox is made at a session's first command and kept while the session lives: its
namespaces, mounts and private `/tmp` last, and each command is started in it by the init
with a fresh environment, its own pid and mount namespace, its limits and its cgroup.
Every sandbox carries a marker in its argv (`bastion-warm-<digest of the state dir>`) and
a pidfile under `<state dir>/sandboxes/` (where the state dir can be written: in a read-only
container the marker alone is enough), so a restarted service finds and ends every one
an earlier run left, an outer `bwrap` stuck in its setup too.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
from anyio.abc import Process

from bastion.shared.sandboxing.argv import filled_pipes
from bastion.shared.sandboxing.errors import SandboxFailed
from bastion.shared.sandboxing.gitguard import GitGuard
from bastion.shared.sandboxing.output import CappedOutput, OutputTap, capped_pair
from bastion.shared.sandboxing.process import DRAIN_GRACE_S, Finished
from bastion.shared.sandboxing.spec import SandboxSpec

__all__ = [
    "INIT_PATH",
    "INIT_PROGRAM",
    "CompiledInit",
    "Shape",
    "WarmPool",
    "WarmSandbox",
    "WarmTask",
    "git_signature",
    "marked_pids",
    "marker",
    "sweep_marked",
]

INIT_PATH: Final = "/run/bastion/init.pyc"
"""Where the init's program, compiled (`CompiledInit`), is written inside a warm sandbox."""
INIT_PROGRAM: Final = (Path(__file__).parent / "warm_init.py").read_text()
_COMPILER: Final = (
    "import importlib.util, marshal, sys\n"
    "code = compile(sys.stdin.buffer.read(), sys.argv[1], 'exec', dont_inherit=True)\n"
    "sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))\n"
)
"""Run by the machine's python3 on the init's source: a `.pyc` of it (its magic number, then
a header of zeroes: a `.pyc` run as a script is checked against no source)."""
_COMPILE_S: Final = 30.0
MARKER_PREFIX: Final = "bastion-warm-"
_READY_S: Final = 30.0
"""How long a new sandbox may take to say it is ready."""
_CLOSE_S: Final = 5.0
_KILL_S: Final = 10.0
"""How long a cancelled command's init may take to end it before the sandbox is closed."""
_PIDFILES: Final = "sandboxes"

GitSignature = tuple[tuple[str, bool, int, int], ...]


def marker(state_dir: Path) -> str:
    """The argv marker of every warm sandbox of the service using `state_dir`."""
    return MARKER_PREFIX + hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]


def git_signature(git: GitGuard | None) -> GitSignature:
    """What a sandbox's git mounts show: each bound entry (path, writability, device and
    inode) and each watched one; a command may use a warm sandbox only while its own
    plan has the same signature as the one the sandbox was made with."""
    if git is None:
        return ()
    bound = tuple(
        (bind.path, bind.writable, os.fstat(bind.fd).st_dev, os.fstat(bind.fd).st_ino)
        for bind in git.binds
    )
    return bound + tuple((entry.shown, False, -1, -1) for entry in git.watched)


@dataclass(frozen=True)
class Shape:
    """Everything that decides a warm sandbox's mounts and namespaces: a command whose spec
    differs in any of it gets a sandbox of its own."""

    session_id: str
    workspace: Path
    network: str
    hidden: tuple[Path, ...]
    read_only: tuple[Path, ...]
    git_writable: bool
    skill_dir: Path | None
    bridge_socket: Path | None
    host_ids: tuple[int, int] | None

    @classmethod
    def of(cls, spec: SandboxSpec) -> Shape:
        """The shape of `spec`'s sandbox."""
        return cls(
            spec.session_id,
            spec.workspace,
            spec.network,
            spec.hidden,
            spec.read_only,
            spec.git_writable,
            spec.skill_dir,
            spec.bridge.socket if spec.bridge is not None else None,
            (spec.host_ids.uid, spec.host_ids.gid) if spec.host_ids is not None else None,
        )


def marked_pids(mark: str) -> list[int]:
    """Every process whose argv holds `mark` as one argument."""
    found = []
    wanted = mark.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in arguments:
            found.append(int(entry.name))
    return found


def sweep_marked(state_dir: Path) -> int:
    """Kill every warm sandbox process (outer bwrap, init, command) of `state_dir`'s service
    and remove their pidfiles; how many processes were killed."""
    mark = marker(state_dir)
    killed = 0
    pidfiles = state_dir / _PIDFILES
    if pidfiles.is_dir():
        for pidfile in pidfiles.glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pidfile.read_text().split()[0])
                if mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            pidfile.unlink(missing_ok=True)
    for pid in marked_pids(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    with contextlib.suppress(OSError):
        pidfiles.rmdir()
    return killed


class CompiledInit:
    """The init compiled by the machine's python3 once per service (and again only when that
    python3 is another file: upgraded), so no sandbox's start compiles it again (about
    3 ms of CPU each)."""

    def __init__(self, python: str) -> None:
        self.python = python
        self._compiled: tuple[tuple[int, int, int, int], bytes] | None = None

    async def program(self, env: dict[str, str]) -> bytes:
        """The compiled init, for the python3 there now (run in `env`).

        Raises:
            SandboxFailed: python3 is missing or could not compile it.
        """
        try:
            found = os.stat(self.python)
        except OSError as error:
            raise SandboxFailed(self._failed(str(error.strerror))) from None
        identity = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)
        if self._compiled is not None and self._compiled[0] == identity:
            return self._compiled[1]
        done = None
        with filled_pipes([INIT_PROGRAM.encode()]) as (source,), anyio.move_on_after(_COMPILE_S):
            done = await anyio.run_process(
                [self.python, "-I", "-S", "-B", "-c", _COMPILER, INIT_PATH],
                stdin=source,
                check=False,
                env=env,
                cwd="/",
            )
        if done is None:
            raise SandboxFailed(self._failed(f"it did not finish within {_COMPILE_S:g} s"))
        if done.returncode != 0 or not done.stdout:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            reason = said[-1][:300] if said else f"it exited with status {done.returncode}"
            raise SandboxFailed(self._failed(reason))
        self._compiled = (identity, done.stdout)
        return done.stdout

    def _failed(self, reason: str) -> str:
        return (
            f"the warm sandbox's init could not be compiled ({self.python}: {reason}): a warm "
            f"sandbox's init needs {self.python}, the machine's python3 (standard library only)"
        )


class InitGone(SandboxFailed):
    """A warm sandbox's init ended (killed, or its sandbox closed) while it was needed."""


def _memfd(payload: bytes) -> int:
    """A sealed memory file holding `payload`: what the init reads one request from."""
    fd = os.memfd_create("bastion-command", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.write(fd, payload)
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except OSError:
        os.close(fd)
        raise
    return fd


async def _drain(fd: int, into: CappedOutput) -> None:
    """Feed `into` from the pipe `fd` until every writer has closed it."""
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            return
        into.feed(chunk)


async def _reply(channel: socket.socket) -> dict[str, Any] | None:
    """The init's next message on `channel`; None once its end of it is closed."""
    while True:
        await anyio.wait_readable(channel)
        try:
            message = channel.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            return None
        if not message:
            return None
        reply: dict[str, Any] = json.loads(message)
        return reply


class WarmTask:
    """A background task running in a warm sandbox, answering on a channel of its own."""

    def __init__(self, channel: socket.socket, sandbox: WarmSandbox) -> None:
        self._channel = channel
        self._sandbox = sandbox

    async def wait(self) -> int | None:
        """The task's exit status once every process of it is gone; None: the sandbox
        ended first (its init was killed or the sandbox closed)."""
        try:
            while (reply := await _reply(self._channel)) is not None:
                if reply.get("op") == "exited":
                    return int(reply.get("status", 1))
                if reply.get("op") == "failed":
                    return None
            return None
        finally:
            self._sandbox.tasks -= 1
            self._sandbox.used = time.monotonic()
            self._channel.close()

    def signal(self, what: str) -> None:
        """`term` (SIGTERM to the task's process group) or `kill` (SIGKILL to its pid 1,
        and so to every process of its pid namespace)."""
        with contextlib.suppress(OSError):
            self._channel.send(json.dumps({"op": what}).encode())


class WarmSandbox:
    """One long-lived sandbox: its outer bwrap, the channel to its init, its git plan."""

    def __init__(
        self,
        process: Process,
        channel: socket.socket,
        git: contextlib.ExitStack,
        signature: GitSignature,
        pidfile: Path,
    ) -> None:
        self._process = process
        self._channel = channel
        self._git = git
        self.signature = signature
        self._pidfile = pidfile
        self.busy = False
        self.gone = False
        self.used = time.monotonic()
        self.tasks = 0
        """Background tasks running in it: it is not closed for being idle while any are."""

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        channel: socket.socket,
        inner: int,
        pass_fds: Sequence[int],
        env: dict[str, str],
        git: contextlib.ExitStack,
        signature: GitSignature,
        pidfile: Path,
        why: str,
    ) -> WarmSandbox:
        """Start `argv` (bwrap running the init on `inner`) and wait for the init's `ready`.

        Raises:
            SandboxFailed: the sandbox did not start; `why` says what to check.
        """
        try:
            with contextlib.suppress(OSError):  # a read-only state dir: the marker is enough
                pidfile.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            process = await anyio.open_process(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )
        finally:
            os.close(inner)  # the init's end: the sandbox holds it now
        with contextlib.suppress(OSError):
            pidfile.with_name(f"{process.pid}.pid").write_text(f"{process.pid}\n")
        made = cls(process, channel, git, signature, pidfile.with_name(f"{process.pid}.pid"))
        channel.setblocking(False)
        reply: dict[str, Any] | None = None
        with anyio.move_on_after(_READY_S):
            reply = await made._receive()
        if reply is None or reply.get("op") != "ready":
            said = b""
            with anyio.CancelScope(shield=True):
                made.gone = True
                channel.close()
                with anyio.move_on_after(_CLOSE_S):
                    await process.wait()
                if process.stderr is not None and process.returncode is not None:
                    with anyio.move_on_after(1), contextlib.suppress(anyio.EndOfStream):
                        said = await process.stderr.receive()
                await made.aclose()
            complaint = said.decode(errors="replace").strip().splitlines()
            reason = complaint[0][:300] if complaint else "it said nothing"
            raise SandboxFailed(f"the bubblewrap sandbox did not start ({reason}): {why}")
        return made

    async def _receive(self) -> dict[str, Any] | None:
        """The init's next reply; None once its end of the channel is closed."""
        return await _reply(self._channel)

    def _send(self, fields: dict[str, Any], fds: Sequence[int] = ()) -> None:
        try:
            socket.send_fds(self._channel, [json.dumps(fields).encode()], list(fds))
        except OSError:
            self.gone = True
            raise InitGone(_GONE) from None

    def alive(self) -> bool:
        """Whether the init still answers (its process has not ended)."""
        if self.gone or self._process.returncode is not None:
            return False
        try:
            peeked = self._channel.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return bool(peeked)

    async def run(
        self,
        payload: bytes,
        cgroup_fds: Sequence[int],
        *,
        wall_s: float,
        output_bytes: int,
        on_timeout: Callable[[], None] | None = None,
        tap: OutputTap | None = None,
    ) -> Finished:
        """Have the init run the command `payload` describes, within `wall_s`; once that
        runs out, `on_timeout` (killing the command's cgroup) is called before the init is
        asked to kill the command's pid 1. The reply comes once every process of the
        command is gone. Each chunk of its output is also given to `tap`.

        Raises:
            InitGone: the init ended before the command did (the sandbox is then gone).
            SandboxFailed: the init could not start the command.
        """
        started = time.monotonic()
        stdout, stderr = capped_pair(output_bytes, tap)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        memfd = _memfd(payload)
        try:
            self._send({"op": "run"}, [memfd, out_write, err_write, *cgroup_fds])
        finally:
            for fd in (memfd, out_write, err_write):
                os.close(fd)
        try:
            os.set_blocking(out_read, False)
            os.set_blocking(err_read, False)
            status, timed_out = await self._follow(
                stdout, stderr, out_read, err_read, wall_s, on_timeout=on_timeout
            )
        finally:
            os.close(out_read)
            os.close(err_read)
        self.used = time.monotonic()
        return Finished(
            returncode=status,
            timed_out=timed_out,
            stdout=stdout,
            stderr=stderr,
            duration_s=time.monotonic() - started,
        )

    async def start_task(self, payload: bytes, cgroup_fds: Sequence[int], output: int) -> WarmTask:
        """Have the init start the command `payload` describes as a background task, both
        its streams written to `output`, beside whatever else runs; it answers on a channel
        of its own (`WarmTask`).

        Raises:
            InitGone: the init is gone.
            SandboxFailed: the init could not start the command.
        """
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        memfd = _memfd(payload)
        try:
            self._send(
                {"op": "run", "task": True}, [memfd, output, output, *cgroup_fds, theirs.fileno()]
            )
        except BaseException:
            mine.close()
            raise
        finally:
            os.close(memfd)
            theirs.close()
        mine.setblocking(False)
        task = WarmTask(mine, self)
        self.tasks += 1
        reply: dict[str, Any] | None = None
        with anyio.move_on_after(_READY_S):
            reply = await _reply(mine)
        if reply is None or reply.get("op") != "started":
            task.signal("kill")
            self.tasks -= 1
            mine.close()
            why = (reply or {}).get("why", "the sandbox's init did not start it")
            raise SandboxFailed(f"{why}: {_AGAIN}")
        return task

    async def _follow(
        self,
        stdout: CappedOutput,
        stderr: CappedOutput,
        out_read: int,
        err_read: int,
        wall_s: float,
        *,
        on_timeout: Callable[[], None] | None,
    ) -> tuple[int, bool]:
        """The command's status and whether its wall clock ran out, its output drained."""
        timed_out = False
        reply: dict[str, Any] | None = None
        try:
            async with anyio.create_task_group() as readers:
                readers.start_soon(_drain, out_read, stdout)
                readers.start_soon(_drain, err_read, stderr)
                reply = await self._receive()
                if reply is not None and reply.get("op") == "started":
                    with anyio.move_on_after(wall_s):
                        reply = await self._receive()
                    if reply is not None and reply.get("op") == "started":
                        timed_out = True
                        if on_timeout is not None:
                            on_timeout()
                        self._send({"op": "kill"})
                        reply = await self._receive()
                readers.cancel_scope.deadline = anyio.current_time() + DRAIN_GRACE_S
        except anyio.get_cancelled_exc_class():
            # The call was cancelled (`bastion.shared.cancelling`): the init ends the command,
            # its pid namespace and every process in it, and the sandbox serves the next one.
            self.gone = not await self._killed(reply)
            raise
        except BaseException:
            self.gone = True  # failed mid-command: the sandbox is not reused
            raise
        if reply is None:
            self.gone = True
            raise InitGone(_GONE)
        if reply.get("op") == "failed":
            raise SandboxFailed(f"{reply.get('why', 'the init did not say why')}: {_AGAIN}")
        return int(reply.get("status", 1)), timed_out

    async def _killed(self, reply: dict[str, Any] | None) -> bool:
        """Have the init kill a command still running (`reply`: the last one read) and read
        its end; whether it ended within `_KILL_S`, the init still answering."""
        if reply is not None and reply.get("op") != "started":
            return True  # it had ended already
        with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_S):
            try:
                self._send({"op": "kill"})
            except InitGone:
                return False
            while reply is None or reply.get("op") == "started":
                reply = await self._receive()
                if reply is None:
                    return False
            return True
        return False

    async def aclose(self) -> None:
        """End the sandbox: its channel closed, the init and every process in it end."""
        self.gone = True
        with contextlib.suppress(OSError):
            self._channel.close()
        with anyio.move_on_after(_CLOSE_S):
            await self._process.wait()
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            await self._process.wait()
        await self._process.aclose()
        self._git.close()
        self._pidfile.unlink(missing_ok=True)


_GONE: Final = (
    "the session's sandbox ended while this command ran (its init was killed or the "
    "sandbox was closed), so the command's result is lost: run it again; the next call "
    "starts a fresh sandbox, with an empty /tmp"
)
_AGAIN: Final = "run the command again, and if it keeps failing, check the sandbox service's log"


class WarmPool:
    """The warm sandboxes of one service, by shape; each closed after `idle_s` unused."""

    def __init__(self, state_dir: Path, idle_s: float) -> None:
        self.state_dir = state_dir
        self.marker = marker(state_dir)
        self.idle_s = idle_s
        self._sandboxes: dict[Shape, WarmSandbox] = {}
        self._retired: list[WarmSandbox] = []
        self._spawning: set[Shape] = set()
        self._ended: dict[str, str] = {}
        """Sessions whose sandbox ended between their commands: what to tell the next one."""

    def pidfile(self) -> Path:
        """Where a new sandbox's pidfile goes (renamed after its bwrap's pid)."""
        return self.state_dir / _PIDFILES / "new.pid"

    async def for_task(
        self, shape: Shape, signature: GitSignature, spawn: Callable[[], Awaitable[WarmSandbox]]
    ) -> WarmSandbox:
        """The sandbox of `shape` for a background task, busy with a command or not (a task
        shares the session's sandbox, its network namespace and `/tmp` with its commands);
        made with `spawn` when there is none or the one there was ended.

        Raises:
            SandboxFailed: a sandbox could not be made.
        """
        found = self._sandboxes.get(shape)
        if found is not None and found.alive() and (found.busy or found.signature == signature):
            return found
        while shape in self._spawning:  # a command of the session is making it
            await anyio.sleep(0.05)
            found = self._sandboxes.get(shape)
            if found is not None and found.alive():
                return found
        made = self.take(shape, signature)
        await self.close_retired()
        if made is not None:
            made.busy = False
            return made
        try:
            made = await spawn()
        except BaseException:
            self.spawn_failed(shape)
            raise
        self.add(shape, made)
        made.busy = False
        return made

    def busy(self, shape: Shape) -> bool:
        """Whether the sandbox of `shape` is running a command or being made (a further
        command of the session then runs in a cold sandbox)."""
        found = self._sandboxes.get(shape)
        return shape in self._spawning or (found is not None and found.busy)

    def take(self, shape: Shape, signature: GitSignature) -> WarmSandbox | None:
        """The sandbox of `shape` to use, marked busy; None: one must be made (marked being
        made), the one there was having ended or its git mounts no longer being the
        workspace's (it is retired: `close_retired`)."""
        found = self._sandboxes.get(shape)
        if found is not None and found.alive() and found.signature == signature:
            found.busy = True
            return found
        if found is not None:
            if not found.alive():
                self._ended[shape.session_id] = (
                    "bastion: this session's sandbox had ended (its init was gone); a fresh "
                    "one was started, so /tmp is empty again"
                )
            del self._sandboxes[shape]
            self._retired.append(found)
        self._spawning.add(shape)
        return None

    def spawn_failed(self, shape: Shape) -> None:
        """The sandbox `take` said to make did not start."""
        self._spawning.discard(shape)

    async def close_retired(self) -> None:
        """Close the sandboxes `take` replaced."""
        retired, self._retired = self._retired, []
        for sandbox in retired:
            with anyio.CancelScope(shield=True):
                await sandbox.aclose()

    def add(self, shape: Shape, sandbox: WarmSandbox) -> None:
        """Keep a new sandbox of `shape`, busy with its first command."""
        sandbox.busy = True
        self._spawning.discard(shape)
        self._sandboxes[shape] = sandbox

    def note(self, session_id: str) -> list[str]:
        """What to tell a session's command of its sandbox having ended since the last."""
        said = self._ended.pop(session_id, None)
        return [said] if said else []

    async def done(self, shape: Shape, sandbox: WarmSandbox) -> None:
        """A command of `sandbox` ended: keep it for the next, or close it if it is gone."""
        sandbox.busy = False
        sandbox.used = time.monotonic()
        if sandbox.gone or not sandbox.alive():
            if self._sandboxes.get(shape) is sandbox:
                del self._sandboxes[shape]
            with anyio.CancelScope(shield=True):
                await sandbox.aclose()

    async def release(self, session_id: str) -> int:
        """Close the sandboxes of a closed session; how many there were."""
        closing = [shape for shape in self._sandboxes if shape.session_id == session_id]
        for shape in closing:
            sandbox = self._sandboxes.pop(shape)
            with anyio.CancelScope(shield=True):
                await sandbox.aclose()
        self._ended.pop(session_id, None)
        return len(closing)

    async def close_idle(self) -> None:
        """Close each sandbox unused for `idle_s`; its session's next command is told."""
        now = time.monotonic()
        for shape, sandbox in list(self._sandboxes.items()):
            if not sandbox.busy and not sandbox.tasks and now - sandbox.used >= self.idle_s:
                del self._sandboxes[shape]
                self._ended[shape.session_id] = (
                    f"bastion: this session's sandbox was closed after {self.idle_s:g} s "
                    "without a command (BASTION_SANDBOX_IDLE_S); a fresh one was started, "
                    "so /tmp is empty again"
                )
                with anyio.CancelScope(shield=True):
                    await sandbox.aclose()

    async def aclose(self) -> None:
        """Close every sandbox, then sweep whatever of this state dir's is left."""
        sandboxes, self._sandboxes = list(self._sandboxes.values()), {}
        with anyio.CancelScope(shield=True):
            for sandbox in sandboxes:
                await sandbox.aclose()
            await self.close_retired()
        sweep_marked(self.state_dir)
