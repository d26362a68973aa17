"""The init of a warm sandbox: pid 1 inside it, starting each command it is sent.

This file is not imported by the service: its text is written into the sandbox
(`--ro-bind-data`) and run there by the machine's `python3` (standard library only) as
pid 1 of the sandbox's pid namespace (docs/architecture.md §5; docs/sandbox.md, "A warm
sandbox per session").
It is driven over one `SOCK_SEQPACKET` socket inherited from the sandbox service (its
number is the first argument), never over a path or a network a command could reach.

Each `run` request carries, as descriptors: a sealed memfd holding the command's argv,
limits and environment (secrets included), the write ends of its stdout and stderr, and
an open `cgroup.procs` (on cgroup v1 `tasks`) of each of its cgroups. For each command the
init forks a leader, which makes a new pid, mount and IPC namespace and forks the command's
first process: pid 1 of that new namespace, so when it ends the kernel kills every process
the command left, and its own `/proc` shows only the command's processes. That process joins the
cgroups, mounts its own `/proc` and `/dev/shm`, takes fresh keyrings, drops every
capability, sets the limits, and execs the command with exactly the environment it was
sent. The init zeroes its copy of the request once it has forked. Replies: `ready` once,
then `started` and `exited` (with the leader's status, sent once every process of the
command is gone) or `failed` (a sentence) per command. `kill` has the leader SIGKILL the
command's pid 1; the channel closing does too, then ends the init, and with it the whole
sandbox.

Several commands live at once: one command at a time answers on the channel, and any
number of background tasks (a `run` with `task` set) each answer on a channel of their own,
sent as the request's last descriptor; a task's leader stays while later commands run. On
a task's channel, `term` has its leader send SIGTERM to the command's process group and
`kill` (or that channel closing) SIGKILL its pid 1, so every process it left dies with its
pid namespace, a double fork or a `setsid` too.

Every sandbox's start pays for each module the init imports, so it imports only the
interpreter's built-in ones and `ctypes` (for the system calls Python has no call for):
`_socket`, `_signal` and `_json` rather than `socket`, `signal` and `json`, no `typing`,
`contextlib` or `platform`, each of which pulls in `enum`, `re` or `collections` (together
about 20 ms of CPU at each start, several times the rest of the init's).
"""

# ruff: noqa: SIM105  (`contextlib.suppress` is one of the imports the init does without)

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub; `signal` itself imports `enum`
import _socket
import ctypes
import errno
import os
import resource
import select
import sys
from _json import encode_basestring_ascii, make_scanner

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` is milliseconds to import: the annotations are only read by mypy
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
_MAX_FDS = 9
_INT = 4
"""A descriptor's size in an `SCM_RIGHTS` message (a C int)."""
_SIGKILL: int = _signal.SIGKILL
_SIGTERM: int = _signal.SIGTERM

_libc = ctypes.CDLL(None, use_errno=True)


class _JsonDefaults:
    """What `_json`'s scanner reads of a decoder: `json.loads`' own defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": -float("inf"), "Infinity": float("inf"), "NaN": float("nan")}.get


_scan = make_scanner(_JsonDefaults())  # type: ignore[arg-type]


def _loads(text: bytes) -> Any:
    """`json.loads` of one message the service sent, with `json`'s own C scanner."""
    decoded = text.decode()
    try:
        value, end = _scan(decoded, 0)
    except StopIteration:
        raise ValueError("not a JSON message") from None
    if end != len(decoded):
        raise ValueError("not one JSON message")
    return value


def _dumps(fields: dict[str, str | int]) -> bytes:
    """`json.dumps(fields).encode()` for a reply's few strings and integers."""
    items = (
        f"{encode_basestring_ascii(name)}: "
        + (encode_basestring_ascii(value) if isinstance(value, str) else str(int(value)))
        for name, value in fields.items()
    )
    return ("{" + ", ".join(items) + "}").encode()


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


def _fresh_mounts(fresh_tmp: str, shm: str, read_only: list[str]) -> None:
    """A `/proc` of the command's own pid namespace, masked as bwrap masks the sandbox's
    (the kernel lets a new proc be mounted only where the old one is fully visible, so
    the old one's masks are lifted first, in this mount namespace only), an empty
    `/dev/shm` of `shm`'s size, gone with the command's mount namespace, and each path of
    `read_only` made read-only for this command alone (a background task's view of the
    workspace's `.git`, which no sweep follows while it runs)."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("/proc/sys", "/proc/sys", None, _MS_BIND | _MS_REC)
    _mount(None, "/proc/sys", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    locked = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    for path in _MASKED:  # a device on a `nodev` mount: reading it fails, as in bwrap's
        _mount("/dev/null", path, None, _MS_BIND)
        _mount(None, path, None, locked)
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, shm)
    if fresh_tmp:
        _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, fresh_tmp)
    for path in read_only:
        if not os.path.lexists(path):
            raise OSError(errno.ENOENT, f"{path} is missing", path)
        _mount(path, path, None, _MS_BIND | _MS_REC)
        _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _fresh_keyrings() -> None:
    """A new session keyring, and the sandbox user's user, user-session and persistent
    keyrings emptied: a key one command adds is not there for the next, and the keys it
    holds (counted against the host user's key quota) go with its processes (where the
    kernel has keyrings).

    Raises:
        OSError: the kernel gave no new session keyring (the host user's key quota is used
            up): the command is not started rather than run beside an earlier one's keys.
    """
    number = _KEYCTL.get(os.uname().machine)
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


def _command(
    payload: bytearray, outputs: tuple[int, int], cgroups: list[int], why: int, alive: int
) -> NoReturn:
    """The command's first process, pid 1 of its namespaces: join its cgroups, set up, exec.

    It also dies with its leader (`PR_SET_PDEATHSIG`), a second wall only: the leader
    kills it directly. A leader already gone (its end of the `alive` pipe closed) ends it
    at once."""
    try:
        os.setpgid(0, 0)  # a group of its own: what a task's `term` signals
        _check(_libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0), "pdeathsig")
        for fd in cgroups:
            os.write(fd, b"0")
            os.close(fd)
        os.set_blocking(alive, False)
        try:
            if os.read(alive, 1) == b"":
                os._exit(128 + _SIGKILL)
        except BlockingIOError:
            pass
        text, _, block = bytes(payload).partition(b"\n")
        payload[:] = bytes(len(payload))
        header = _loads(text)
        environment = dict(_pairs([entry for entry in block.split(b"\0") if entry]))
        del block
        _fresh_mounts(header["fresh_tmp"], header["shm"], header.get("read_only", []))
        _fresh_keyrings()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(outputs[0], 1)
        os.dup2(outputs[1], 2)
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


def _leader(
    payload: bytearray, outputs: tuple[int, int], cgroups: list[int], why: int, stop: int
) -> NoReturn:
    """Make the command's namespaces, start it, and exit as it does.

    The leader stays out of the command's cgroups (so a cgroup kill or an OOM kill there
    never takes it) and ends the command itself: when `stop` becomes readable (the init
    asked, or the init is gone) it sends SIGKILL to the command's pid 1, its own child, so
    the kernel kills every process of that namespace; its `waitpid` returns only once they
    are all gone. A `t` read from `stop` sends SIGTERM to the command's process group
    instead, and the leader waits on. Nothing rests on the command's `PR_SET_PDEATHSIG`,
    which a command that traces its own pid 1 can clear."""
    try:
        _check(_libc.unshare(_CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWIPC), "unshare")
        alive_read, alive_write = os.pipe()
        child = os.fork()
    except OSError as error:
        os.write(why, f"the command's namespaces could not be made ({error})".encode())
        os._exit(127)
    if child == 0:
        os.close(alive_write)
        os.close(stop)
        _command(payload, outputs, cgroups, why, alive_read)
    payload[:] = bytes(len(payload))
    for fd in (why, alive_read, *outputs, *cgroups):
        os.close(fd)
    ended = os.pidfd_open(child)
    while True:
        ready, _, _ = select.select([ended, stop], [], [])
        if stop not in ready:
            break
        if os.read(stop, 1) == b"t":
            try:
                os.killpg(child, _SIGTERM)
            except ProcessLookupError:  # its group not made yet, or gone
                pass
            continue
        os.kill(child, _SIGKILL)  # not yet reaped: the pid is still its own
        break
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _end_orphans(leaders: set[int]) -> None:
    """Kill and reap every process left a child of the init but the live `leaders` (a
    command's pid 1 whose leader was itself killed is one): none of a command outlives the
    answer for it."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or int(entry) in leaders:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid():
            try:
                os.kill(int(entry), _SIGKILL)
                os.waitpid(int(entry), 0)
            except (ChildProcessError, ProcessLookupError):
                continue


def _receive(channel: _socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors it carried, read as `socket.recv_fds` reads them."""
    message, ancillary, _, _ = channel.recvmsg(4096, _socket.CMSG_LEN(_MAX_FDS * _INT))
    fds = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            for start in range(0, len(data) - _INT + 1, _INT):
                fds.append(int.from_bytes(data[start : start + _INT], sys.byteorder, signed=True))
    for fd in fds:
        os.set_inheritable(fd, False)
    if not message:
        return None, fds
    return _loads(message), fds


def _send(channel: _socket.socket, **fields: str | int) -> None:
    try:
        channel.send(_dumps(fields))
    except OSError:  # a task's channel its service closed: none to tell
        pass


class _Live:
    """One running command: its leader, how to stop it, and the channel it answers on."""

    def __init__(self, leader: int, stop: tuple[int, int], why: int, answer: _socket.socket):
        self.leader = leader
        self.ended = os.pidfd_open(leader)
        self.stop_read, self.stop_write = stop
        self.why = why
        self.answer = answer

    def signal(self, what: bytes) -> None:
        """Have the leader send `t` (SIGTERM to the group) or `k` (SIGKILL to pid 1)."""
        try:
            os.write(self.stop_write, what)
        except OSError:  # the leader is gone already
            pass

    def finish(self, leaders: set[int]) -> None:
        """Reap the leader, end what the command left, and answer how it ended."""
        _, status = os.waitpid(self.leader, 0)
        leaders.discard(self.leader)
        _end_orphans(leaders)
        for fd in (self.ended, self.stop_read, self.stop_write):
            os.close(fd)
        os.set_blocking(self.why, False)
        try:
            why = os.read(self.why, 4096)
        except BlockingIOError:
            why = b""
        os.close(self.why)
        if why:
            _send(self.answer, op="failed", why=why.decode(errors="replace"))
        else:
            _send(self.answer, op="exited", status=os.waitstatus_to_exitcode(status))


def _start(request: dict[str, Any], fds: list[int], channel: _socket.socket) -> _Live | None:
    """Fork one command's leader; None (said on its channel) if the request cannot run."""
    task = bool(request.get("task"))
    answer = channel
    if task and fds:
        answer = _socket.socket(fileno=fds.pop())
        os.set_inheritable(answer.fileno(), False)
    if len(fds) < 3 or (task and answer is channel):
        for fd in fds:
            os.close(fd)
        _send(answer, op="failed", why="the request carried too few descriptors")
        if answer is not channel:
            answer.close()
        return None
    memfd, stdout, stderr, *cgroups = fds
    payload = bytearray(os.fstat(memfd).st_size)
    os.preadv(memfd, [payload], 0)
    os.close(memfd)
    why_read, why_write = os.pipe()
    stop_read, stop_write = os.pipe()
    leader = os.fork()
    if leader == 0:
        os.close(stop_write)
        os.close(why_read)
        _leader(payload, (stdout, stderr), cgroups, why_write, stop_read)
    payload[:] = bytes(len(payload))
    for fd in (stdout, stderr, *cgroups, why_write):
        os.close(fd)  # stop_read is kept: a `kill` after the leader ended raises no SIGPIPE
    _send(answer, op="started")
    return _Live(leader, (stop_read, stop_write), why_read, answer)


def _serve(channel: _socket.socket) -> None:
    """Start each command the channel asks for and answer for each as it ends; once the
    channel closes, kill every command still running and return."""
    live: dict[int, _Live] = {}
    """By the descriptor that becomes readable when the command's leader ends."""
    tasks: dict[int, _Live] = {}
    """Background tasks, by their own channel's descriptor."""
    leaders: set[int] = set()
    while True:
        ready, _, _ = select.select([channel.fileno(), *live, *tasks], [], [])
        for fd in ready:
            if fd in live:
                ended = live.pop(fd)
                ended.finish(leaders)
                if ended.answer is not channel:
                    tasks.pop(ended.answer.fileno(), None)
                    ended.answer.close()
            elif fd in tasks:
                task = tasks[fd]
                asked, extra = _receive(task.answer)
                for other in extra:
                    os.close(other)
                task.signal(b"t" if asked is not None and asked.get("op") == "term" else b"k")
                if asked is None:  # its service let go of it: it dies
                    del tasks[fd]
        if channel.fileno() not in ready:
            continue
        request, fds = _receive(channel)
        if request is None:
            for running in live.values():
                running.signal(b"k")
            for running in live.values():
                os.waitpid(running.leader, 0)
            _end_orphans(set())
            return
        if request.get("op") == "run":
            started = _start(request, fds, channel)
            if started is not None:
                live[started.ended] = started
                leaders.add(started.leader)
                if started.answer is not channel:
                    tasks[started.answer.fileno()] = started
        else:
            for fd in fds:
                os.close(fd)
            if request.get("op") == "kill":  # the foreground command, the one answering here
                for running in live.values():
                    if running.answer is channel:
                        running.signal(b"k")


def main() -> None:
    for number in (_signal.SIGINT, _signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(number, _signal.SIG_DFL)
    _check(_libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl")
    channel = _socket.socket(fileno=int(sys.argv[1]))
    os.set_inheritable(channel.fileno(), False)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    _send(channel, op="ready")
    _serve(channel)
    os._exit(0)  # nothing to flush or finalize: the sandbox ends with its pid 1


if __name__ == "__main__":
    main()
