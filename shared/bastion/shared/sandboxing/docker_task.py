"""A background task in a session's Docker container: one exec of a small reaper, which
starts the command in a session of its own and, as a child subreaper, stays the parent of
everything the command leaves, so that stopping the task ends every process of it
(docs/sandbox.md, "Background tasks").

The reaper runs with the image's `python3` (a shell cannot be a subreaper, and a container
without capabilities can have no cgroup or pid namespace of its own per task). The task's
both streams go to the exec's stdout; the reaper's own stderr is its channel to the service:
`started <pid> <start time>` once the command runs, `ended <status>` once every process of
it is gone. The service signals it with a further exec, which checks that the pid is still
the reaper's (the same start time): SIGTERM is passed to the command's process group,
SIGUSR1 has every descendant killed until none is left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, TypeVar

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream

from bastion.shared.sandboxing.docker_engine import ExecOutput
from bastion.shared.sandboxing.errors import SandboxFailed
from bastion.shared.sandboxing.gitguard import GitGuard
from bastion.shared.sandboxing.process import DRAIN_GRACE_S

if TYPE_CHECKING:
    from bastion.shared.sandboxing.docker import DockerSandboxes

__all__ = ["REAPER", "DockerTask", "TaskPump", "reaper_argv"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

REAPER: Final = r"""# bastion task reaper
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    os.write(2, b"failed the reaper could not become a subreaper\n")
    sys.exit(125)
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the task cannot trace it or open its fds
me = os.getpid()
status = None
class Stop(Exception):
    pass
def code(raw):
    return os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else 128 + os.WTERMSIG(raw)
def tree():
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/" + name + "/stat", "rb") as stat:
                    parent = int(stat.read().rpartition(b")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(name))
    found, todo = [], [me]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found
def reap():
    global status
    while True:
        pid, raw = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        if pid == leader:
            status = code(raw)
def kill_all():
    while True:
        for pid in tree():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            reap()
        except ChildProcessError:
            return
        time.sleep(0.02)
def term(*_):
    try:
        os.killpg(leader, signal.SIGTERM)
    except OSError:
        pass
def stop(*_):
    raise Stop
signal.signal(signal.SIGTERM, term)
signal.signal(signal.SIGUSR1, stop)
asks = {signal.SIGTERM, signal.SIGUSR1}
signal.pthread_sigmask(signal.SIG_BLOCK, asks)  # held until the leader is known
with open("/proc/self/stat", "rb") as stat:
    began = stat.read().rpartition(b")")[2].split()[19]
os.write(2, b"started %d %s\n" % (me, began))  # before the command can kill it
leader = os.fork()
if leader == 0:
    try:
        for number in asks:
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, asks)
        os.setsid()
        os.dup2(1, 2)
        os.execv("/bin/sh", ["/bin/sh", "-c", sys.argv[1]])
    finally:
        os._exit(127)
try:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, asks)
    while status is None:
        pid, raw = os.waitpid(-1, 0)
        if pid == leader:
            status = code(raw)
except (Stop, ChildProcessError):
    pass
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
kill_all()
status = 128 + signal.SIGKILL if status is None else status
os.write(2, b"ended %d\n" % status)
os._exit(status)
"""
"""The task's pid 1 in all but name: the subreaper every process of the command stays under."""

_SIGNAL: Final = r"""import os, sys
pid, began, number = int(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3])
try:
    with open("/proc/%d/stat" % pid, "rb") as stat:
        if stat.read().rpartition(b")")[2].split()[19] == began:
            os.kill(pid, number)
except OSError:
    pass
"""
"""Signal the reaper, if the pid is still its (the same start time): never another process."""

_STARTED: Final = re.compile(rb"^started (\d+) (\d+)\n", re.MULTILINE)
_ENDED: Final = re.compile(rb"^ended (\d+)\n", re.MULTILINE)
_ESCAPED_S: Final = 5.0
"""How long the reaper has, once told to kill, before the container's `kill -9 -1`."""


def reaper_argv(command: str) -> list[str]:
    """The exec's argv: the reaper running `command` with `/bin/sh -c`."""
    return ["python3", "-I", "-S", "-c", REAPER, command]


def _write_all(fd: int, data: bytes) -> bool:
    """Write `data` to the task's log pipe; False once its reader has gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return False
    return True


class TaskPump:
    """The exec's output, read in a worker thread: stdout into the log pipe `fd` (which it
    owns), stderr (the reaper's) kept to be read as its control lines.

    A read runs in a thread that a cancelled caller may leave behind: `close` then leaves
    closing `fd` to that thread, so nothing is ever written to a descriptor number reused.
    """

    def __init__(self, output: ExecOutput, fd: int) -> None:
        self.output = output
        self.fd = fd
        self.control = b""
        self._chunks: Iterator[tuple[bytes | None, bytes | None]] = output.chunks()
        self._reader = True
        self._lock = threading.Lock()
        self._busy = False
        self._left = False
        self._closed = False

    def reading(self, read: Callable[[], T]) -> Callable[[], T]:
        """`read` (`until_started`, `rest`), to run in a worker thread; marked busy now."""
        with self._lock:
            self._busy = True

        def guarded() -> T:
            try:
                return read()
            finally:
                with self._lock:
                    self._busy = False
                    if self._left:
                        self._close_fd()

        return guarded

    def until_started(self) -> tuple[int, bytes] | None:
        """Read until the reaper says it started the command: its pid and start time; None
        if the exec ended first."""
        for chunk_out, chunk_err in self._chunks:
            self._feed(chunk_out, chunk_err)
            found = _STARTED.search(self.control)
            if found is not None:
                return int(found.group(1)), found.group(2)
        return None

    def rest(self) -> None:
        """Read until every process holding the exec's output has gone."""
        for chunk_out, chunk_err in self._chunks:
            self._feed(chunk_out, chunk_err)

    def _feed(self, chunk_out: bytes | None, chunk_err: bytes | None) -> None:
        if chunk_out and self._reader:
            self._reader = _write_all(self.fd, chunk_out)
        if chunk_err:
            self.control = (self.control + chunk_err)[-4096:]

    def note(self, text: str) -> None:
        """Add a line of the service's to the log (no read may be running)."""
        if self._reader and not self._closed:
            self._reader = _write_all(self.fd, f"{text}\n".encode())

    def ended(self) -> int | None:
        """The status the reaper said, if it lived to say it."""
        found = _ENDED.search(self.control)
        return int(found.group(1)) if found is not None else None

    def close(self) -> None:
        """Stop reading and close the log pipe (or have a read still running close it)."""
        self.output.close()
        with self._lock:
            if self._busy:
                self._left = True
            else:
                self._close_fd()

    def _close_fd(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.fd)


class DockerTask:
    """One task's exec in the session's container, followed until its output ends."""

    def __init__(
        self,
        sandboxes: DockerSandboxes,
        *,
        container_id: str,
        user: str,
        exec_id: str,
        pump: TaskPump,
        reaper: tuple[int, bytes],
        git: GitGuard | None,
        kept: contextlib.ExitStack,
    ) -> None:
        self._sandboxes = sandboxes
        self._container_id = container_id
        self._user = user
        self._exec_id = exec_id
        self._pump = pump
        self._reaper = reaper
        self._git = git
        self._kept = kept
        self._asked, self._asks = anyio.create_memory_object_stream[str](16)
        self._done = anyio.Event()

    async def wait(self) -> int | None:
        """The reaper's status once every process of the task is gone; None if its
        container went first (removed, or the engine lost it)."""
        failed = False
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._signaller, self._asks)
                try:
                    await anyio.to_thread.run_sync(
                        self._pump.reading(self._pump.rest),
                        abandon_on_cancel=True,
                        limiter=self._sandboxes.streams,
                    )
                except SandboxFailed:
                    failed = True
                self._done.set()
                group.cancel_scope.cancel()
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_ESCAPED_S):
                await self._signal(signal.SIGUSR1)
            raise
        finally:
            self._pump.output.close()
            self._asked.close()
            if self._done.is_set():
                for note in self._sweep():
                    self._pump.note(note)
            self._kept.close()  # the exec's output, the log pipe, the git plan
        if failed or self._sandboxes.gone(self._container_id):
            return None
        code = await self._sandboxes.exit_code(self._exec_id)
        if self._pump.ended() is None and code is not None:
            await self._escaped()
        return code

    async def _escaped(self) -> None:
        """The reaper was killed before it said the task ended (by the task: it runs as the
        same user): what the task left is known only as processes of the container's user,
        killed all when nothing else of the session runs there."""
        if self._sandboxes.idle(self._container_id):
            with anyio.CancelScope(shield=True):
                await self._sandboxes.kill_all(self._container_id, self._user)
            return
        logger.warning(
            "a background task's reaper was killed while other commands or tasks ran in "
            "its session's container: what the task left runs on until the container ends"
        )

    def _sweep(self) -> list[str]:
        """What the git sweep moved aside of what the task wrote, said in its log."""
        return self._git.sweep() if self._git is not None else []

    def limit_hit(self) -> str:
        """Nothing: a container's limits are the session's, not the task's."""
        return ""

    def terminate(self) -> None:
        """SIGTERM to the task's process group (by its reaper)."""
        with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
            self._asked.send_nowait("term")

    def kill(self) -> None:
        """SIGKILL to every process of the task (by its reaper; should the reaper be gone,
        every process of the container's user, and then the container)."""
        with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
            self._asked.send_nowait("kill")

    async def _signaller(self, asks: MemoryObjectReceiveStream[str]) -> None:
        async with asks:
            async for ask in asks:
                if ask == "term":
                    await self._signal(signal.SIGTERM)
                    continue
                await self._signal(signal.SIGUSR1)
                with anyio.move_on_after(_ESCAPED_S):
                    await self._done.wait()
                if self._done.is_set():
                    continue
                # The reaper is gone (the task killed it, and the engine keeps the exec's
                # output open) or starved (a fork bomb): the stop must end, so it goes as a
                # `shell` command past its wall clock does.
                logger.warning(
                    "a background task did not end when killed: killing its container's processes"
                )
                await self._sandboxes.kill_all(self._container_id, self._user)
                with anyio.move_on_after(DRAIN_GRACE_S):
                    await self._done.wait()
                if not self._done.is_set():
                    self._pump.output.close()
                    await self._sandboxes.remove_stuck(self._container_id)

    async def _signal(self, number: int) -> None:
        pid, began = self._reaper
        argv = ["python3", "-I", "-S", "-c", _SIGNAL, str(pid), began.decode(), str(number)]
        await self._sandboxes.control(self._container_id, self._user, argv)
