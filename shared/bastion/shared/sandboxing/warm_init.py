"""The init of a warm sandbox: pid 1 inside it, starting each command it is sent.

This file is not imported by the service: its text is written into the sandbox
(`--ro-bind-data`) and run there by the machine's `python3` (standard library only) as
pid 1 of the sandbox's pid namespace (docs/architecture.md §5; docs/sandbox.md, "A warm
sandbox per session").
It is driven over one `SOCK_SEQPACKET` socket inherited from the sandbox service (its
number is the first argument), never over a path or a network a command could reach.

Each `run` request carries, as descriptors: a sealed memfd holding the command's argv,
limits and environment (secrets included), the write ends of its stdout and stderr, and
an open `cgroup.procs` of each of its cgroups. For each command the init has a leader,
which makes a new pid, mount and IPC namespace and forks the command's first process:
pid 1 of that new namespace, so when it ends the kernel kills every process the command
left, and its own `/proc` shows only the command's processes. Both are forked before the
command is asked for (the next ones once a command's answer is sent, so no command waits
for those forks and the `unshare`), and that first process waits for the request,
whose descriptors the init hands it as they came, with its own `/proc` already
mounted. Given them, it joins the cgroups, mounts its own `/dev/shm`, takes fresh
keyrings, drops every
capability, sets the limits, and execs the command with exactly the environment it was
sent. The init never reads the request, and the leader never sees it. Replies: `ready` once,
then `started` and `exited` (with the leader's status, sent once every process of the
command is gone) or `failed` (a sentence) per command. `kill` has the leader SIGKILL the
command's pid 1; the channel closing does too, then ends the init, and with it the whole
sandbox.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import resource
import select
import signal
import socket
import sys
from typing import Any, NoReturn

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_MASKED = ("/proc/keys", "/proc/key-users")
_KEYCTL = {"x86_64": 250, "aarch64": 219}
"""The keyctl system call's number, by machine."""
_KEYCTL_JOIN_SESSION_KEYRING = 1
_KEYCTL_CLEAR = 7
_KEYCTL_GET_PERSISTENT = 22
_KEY_SPEC_SESSION_KEYRING = -3
_KEY_SPEC_USER_KEYRING = -4
_KEY_SPEC_USER_SESSION_KEYRING = -5
_MAX_FDS = 8

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            kind.encode() if kind else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _fresh_proc() -> None:
    """A `/proc` of the command's own pid namespace, masked as bwrap masks the sandbox's
    (the kernel lets a new proc be mounted only where the old one is fully visible, so
    the old one's masks are lifted first, in this mount namespace only)."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("/proc/sys", "/proc/sys", None, _MS_BIND | _MS_REC)
    _mount(None, "/proc/sys", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    locked = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    for path in _MASKED:  # a device on a `nodev` mount: reading it fails, as in bwrap's
        _mount("/dev/null", path, None, _MS_BIND)
        _mount(None, path, None, locked)


def _fresh_tmpfs(fresh_tmp: str, shm: str) -> None:
    """An empty `/dev/shm` of `shm`'s size (and, given `fresh_tmp`, an empty `/tmp`), gone
    with the command's mount namespace."""
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, shm)
    if fresh_tmp:
        _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, fresh_tmp)


def _fresh_keyrings() -> None:
    """A new session keyring, and the sandbox user's user, user-session and persistent
    keyrings emptied: a key one command adds is not there for the next, and the keys it
    holds (counted against the host user's key quota) go with its processes (where the
    kernel has keyrings).

    Raises:
        OSError: the kernel gave no new session keyring (the host user's key quota is used
            up): the command is not started rather than run beside an earlier one's keys.
    """
    number = _KEYCTL.get(platform.machine())
    if number is None:
        return
    if _libc.syscall(number, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        error = ctypes.get_errno()
        if error in (errno.EDQUOT, errno.ENOMEM):
            raise OSError(error, "no fresh session keyring: the host user's key quota is used up")
        return  # keyrings refused here (a seccomp profile, no kernel support): none to keep
    persistent = _libc.syscall(number, _KEYCTL_GET_PERSISTENT, -1, _KEY_SPEC_SESSION_KEYRING)
    keyrings = [_KEY_SPEC_USER_KEYRING, _KEY_SPEC_USER_SESSION_KEYRING]
    if persistent >= 0:
        keyrings.append(persistent)
    for keyring in keyrings:
        _libc.syscall(number, _KEYCTL_CLEAR, keyring)


def _last_capability() -> int:
    """The kernel's highest capability number (read once: it is the kernel's own)."""
    with open("/proc/sys/kernel/cap_last_cap") as last:
        return int(last.read())


_LAST_CAPABILITY = _last_capability()


def _drop_capabilities() -> None:
    """No capability left in any set, so the command holds none (it runs as uid 10001)."""
    for capability in range(_LAST_CAPABILITY + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), "drop capability")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient")
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _set_limits(limits: dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_soft"], limits["cpu_hard"]))
    resource.setrlimit(resource.RLIMIT_AS, (limits["address_space"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size"],) * 2)
    if limits.get("processes") is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)


def _command(link: socket.socket, why: int, alive: int) -> NoReturn:
    """The command's first process, pid 1 of its namespaces, forked ahead of its command:
    mount its `/proc`, wait for the request on `link`, join its cgroups, set up, exec.

    It also dies with its leader (`PR_SET_PDEATHSIG`), a second wall only: the leader
    kills it directly. A leader already gone (its end of the `alive` pipe closed) ends it
    at once; the init closing `link` unasked ends it too (the sandbox is closing)."""
    try:
        _check(_libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0), "pdeathsig")
        os.set_blocking(alive, False)
        try:
            if os.read(alive, 1) == b"":
                os._exit(128 + int(signal.SIGKILL))
        except BlockingIOError:
            pass
        try:
            _fresh_proc()  # nothing of any command's is needed for it: made while waiting
            unmounted = None
        except OSError as error:
            unmounted = error
        message, fds, _, _ = socket.recv_fds(link, 4096, _MAX_FDS)
        link.close()
        if not message or len(fds) < 3:
            os._exit(0)
        memfd, stdout, stderr, *cgroups = fds
        for fd in cgroups:
            os.write(fd, b"0")
            os.close(fd)
        payload = bytearray(os.fstat(memfd).st_size)
        os.preadv(memfd, [payload], 0)
        os.close(memfd)
        text, _, block = bytes(payload).partition(b"\n")
        payload[:] = bytes(len(payload))
        header = json.loads(text)
        environment = dict(_pairs([entry for entry in block.split(b"\0") if entry]))
        del block
        if unmounted is not None:
            raise unmounted
        _fresh_tmpfs(header["fresh_tmp"], header["shm"])
        _fresh_keyrings()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.closerange(3, why)
        os.closerange(why + 1, 1 << 20)
        os.chdir(header["cwd"])
        _set_limits(header["limits"])
        _drop_capabilities()
        argv = header["argv"]
        os.execve(argv[0], argv, environment)
    except OSError as error:
        os.write(why, f"the command could not be started in the sandbox ({error})".encode())
    os._exit(127)


def _pairs(environment: list[bytes]) -> list[tuple[bytes, bytes]]:
    pairs = []
    for entry in environment:
        name, _, value = entry.partition(b"=")
        pairs.append((name, value))
    return pairs


def _leader(link: socket.socket, why: int, stop: int) -> NoReturn:
    """Make the command's namespaces and fork its first process, both ahead of the command
    (which then waits on `link` for its request), and exit as it does.

    The leader stays out of the command's cgroups (so a cgroup kill or an OOM kill there
    never takes it) and ends the command itself: when `stop` becomes readable (the init
    asked, or the init is gone) it sends SIGKILL to the command's pid 1, its own child, so
    the kernel kills every process of that namespace; its `waitpid` returns only once they
    are all gone. Nothing rests on the command's `PR_SET_PDEATHSIG`, which a command that
    traces its own pid 1 can clear."""
    try:
        _check(_libc.unshare(_CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWIPC), "unshare")
        alive_read, alive_write = os.pipe()
        child = os.fork()
    except OSError as error:
        _refuse(link, why, f"the command's namespaces could not be made ({error})")
    if child == 0:
        os.close(alive_write)
        os.close(stop)
        _command(link, why, alive_read)
    link.close()
    for fd in (why, alive_read):
        os.close(fd)
    ended = os.pidfd_open(child)
    ready, _, _ = select.select([ended, stop], [], [])
    if stop in ready:
        os.kill(child, signal.SIGKILL)  # not yet reaped: the pid is still its own
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _refuse(link: socket.socket, why: int, reason: str) -> NoReturn:
    """A leader that could not make the command's namespaces: wait for the request, close
    what it carries, and say `reason` for it (nothing to say if none comes)."""
    message, fds, _, _ = socket.recv_fds(link, 4096, _MAX_FDS)
    for fd in fds:
        os.close(fd)
    if not message:
        os._exit(0)
    os.write(why, reason.encode())
    os._exit(127)


class _Spare:
    """A leader forked ahead of its command, in namespaces of its own, and the init's ends
    of its pipes: the request goes over `link` (to the command's first process, or to the
    leader if it could not fork one), why the command did not start comes on `why`, and a
    byte on `stop` has the leader kill the command."""

    def __init__(self, channel: socket.socket) -> None:
        link, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        why_read, why_write = os.pipe()
        stop_read, stop_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            channel.close()
            link.close()
            os.close(why_read)
            os.close(stop_write)
            _leader(theirs, why_write, stop_read)
        theirs.close()
        os.close(why_write)
        self.link, self.why, self.stop, self._stop_read = link, why_read, stop_write, stop_read

    def close(self) -> None:
        """The init's ends, once the leader has ended."""
        self.link.close()
        for fd in (self.why, self.stop, self._stop_read):
            os.close(fd)


def _end_orphans() -> None:
    """Kill and reap every process left a child of the init (a command's pid 1 whose leader
    was itself killed is one): none of a command outlives the answer for it."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid():
            try:
                os.kill(int(entry), signal.SIGKILL)
                os.waitpid(int(entry), 0)
            except (ChildProcessError, ProcessLookupError):
                continue


def _receive(channel: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    message, fds, _, _ = socket.recv_fds(channel, 4096, _MAX_FDS)
    for fd in fds:
        os.set_inheritable(fd, False)
    if not message:
        return None, fds
    return json.loads(message), fds


def _send(channel: socket.socket, **fields: Any) -> None:
    channel.send(json.dumps(fields).encode())


def _run(channel: socket.socket, fds: list[int], leader: _Spare) -> bool:
    """Have `leader` start one command and answer for it; `kill` meanwhile ends it.
    Whether the leader was used (a request carrying too few descriptors leaves it)."""
    if len(fds) < 3:
        for fd in fds:
            os.close(fd)
        _send(channel, op="failed", why="the request carried too few descriptors")
        return False
    try:
        socket.send_fds(leader.link, [b"run"], fds, socket.MSG_NOSIGNAL)
    except OSError as error:
        os.write(leader.stop, b"k")
        os.waitpid(leader.pid, 0)
        _end_orphans()
        leader.close()
        _send(channel, op="failed", why=f"the command's leader was gone ({error})")
        return True
    finally:
        for fd in fds:
            os.close(fd)
    ended = os.pidfd_open(leader.pid)
    _send(channel, op="started")
    while True:
        ready, _, _ = select.select([channel.fileno(), ended], [], [])
        if ended in ready:
            break
        request, extra = _receive(channel)
        for fd in extra:
            os.close(fd)
        if request is None or request.get("op") == "kill":
            os.write(leader.stop, b"k")  # the leader kills the command's pid 1
        if request is None:
            os.waitpid(leader.pid, 0)
            _end_orphans()
            sys.exit(0)
    _, status = os.waitpid(leader.pid, 0)
    _end_orphans()
    os.close(ended)
    os.set_blocking(leader.why, False)
    try:
        why = os.read(leader.why, 4096)
    except BlockingIOError:
        why = b""
    leader.close()
    if why:
        _send(channel, op="failed", why=why.decode(errors="replace"))
    else:
        _send(channel, op="exited", status=os.waitstatus_to_exitcode(status))
    return True


def main() -> None:
    for number in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_DFL)
    _check(_libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl")
    channel = socket.socket(fileno=int(sys.argv[1]))
    channel.set_inheritable(False)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    leader = _Spare(channel)
    _send(channel, op="ready")
    while True:
        request, fds = _receive(channel)
        if request is None:
            return  # the spare leader, asked for nothing, ends with the sandbox
        if request.get("op") == "run" and _run(channel, fds, leader):
            leader = _Spare(channel)  # after the answer: the next command finds it ready
        elif request.get("op") != "run":
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    main()
