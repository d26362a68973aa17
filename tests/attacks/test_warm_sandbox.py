"""Attacks on the warm sandbox a session keeps between its commands, through the sandbox
service (real NATS, real bwrap) and, where the test must reach the init from outside,
through the bubblewrap backend itself.

Each would succeed against a naive warm design (one shared pid namespace and environment,
an init a command can see, signal or trace, a channel a command inherits): a command must
find nothing of the init, nothing of an earlier command (its processes, environment or
secrets), and nothing of another session; a killed init, a killed service and an idle
timeout each end in a clear message and a working next call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from bastion.proto import errors as codes
from bastion.proto.sandbox import ExecResult, Limits
from bastion.sandbox.service import SandboxSettings, sandbox_service
from bastion.shared.bus import Client
from bastion.shared.errors import RemoteError
from bastion.shared.sandboxing import BwrapBackend, SandboxFailed, SandboxSpec
from bastion.shared.sandboxing.bwrap import WARM_SHM_BYTES, WARM_TMP_BYTES
from bastion.shared.sandboxing.cgroup import cgroup_prefix, find_cgroup_root
from bastion.shared.sandboxing.warm import INIT_PATH, marked_pids, marker, sweep_marked
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.sandbox import SESSION, Host, shell
from tests.helpers.sleepers import sleeping, unique_duration

SECRET_VALUE = "warm-secret-7f3a"
PTRACE_SEIZE = 0x4206


def inits(state_dir: Path) -> list[int]:
    """Host pids of the warm sandboxes' inits (not their outer bwraps) of `state_dir`."""
    found = []
    for pid in marked_pids(marker(state_dir)):
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if arguments[0].endswith(b"python3") and INIT_PATH.encode() in arguments:
            found.append(pid)
    return found


async def until(condition: Callable[[], object], what: str) -> None:
    """Poll `condition()` until true, failing after 20 s with `what`."""
    for _ in range(400):
        if condition():
            return
        await anyio.sleep(0.05)
    raise AssertionError(what)


# --- the init is out of every command's reach ------------------------------------------


async def test_the_init_is_not_among_a_commands_processes(
    client: Client, sandbox: None, host: Host
) -> None:
    await shell(client, host.workspace, "true")
    assert len(inits(host.state_dir)) == 1  # a warm sandbox is there...
    result = await shell(
        client,
        host.workspace,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
    )
    # ...and a command sees only its own processes: pid 1 is its own shell, not the init
    assert INIT_PATH not in result.stdout
    assert "bastion-warm" not in result.stdout
    assert "python3" not in result.stdout


async def test_the_inits_environ_memory_and_descriptors_are_unreadable(
    client: Client, sandbox: None, host: Host
) -> None:
    await shell(client, host.workspace, "true")
    [init] = inits(host.state_dir)
    # The init's host pid, and every pid a command could name, tried from inside.
    probe = (
        f"for p in 1 2 3 {init}; do cat /proc/$p/environ /proc/$p/mem; ls -l /proc/$p/fd; done "
        "2>&1; ls -l /proc/self/fd"
    )
    result = await shell(client, host.workspace, probe)
    assert "socket:" not in result.stdout  # no descriptor of the channel anywhere
    assert "bastion-warm" not in result.stdout
    assert INIT_PATH not in result.stdout
    # The init is not dumpable: its /proc files are root's, not its own uid's, so no
    # process of its uid may read its memory or environment or trace it.
    status = Path(f"/proc/{init}/status").read_text()  # noqa: ASYNC240 (procfs: no wait)
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    assert uid != 0
    assert Path(f"/proc/{init}/environ").stat().st_uid == 0  # noqa: ASYNC240


async def test_tracing_every_pid_never_reaches_the_init(
    client: Client, sandbox: None, host: Host
) -> None:
    await shell(client, host.workspace, "echo kept > /tmp/kept")
    [init] = inits(host.state_dir)
    # PTRACE_SEIZE does not stop what it attaches to; the tracer's exit detaches it.
    tracer = (
        "python3 -c '\n"
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"for pid in [*range(1, 300), {init}]:\n"
        "    if pid == os.getpid(): continue\n"
        f"    if libc.ptrace({PTRACE_SEIZE}, pid, 0, 0) == 0:\n"
        '        print(pid, open(f"/proc/{pid}/cmdline").read())\n'
        "'"
    )
    result = await shell(client, host.workspace, tracer)
    assert INIT_PATH not in result.stdout
    assert "bastion-warm" not in result.stdout
    assert inits(host.state_dir) == [init]  # the same init, untouched...
    after = await shell(client, host.workspace, "cat /tmp/kept")
    assert after.stdout == "kept\n"  # ...still serving the same sandbox


async def test_signals_to_pid_1_and_to_every_pid_leave_the_init_serving(
    client: Client, sandbox: None, host: Host
) -> None:
    await shell(client, host.workspace, "echo kept > /tmp/kept")
    [init] = inits(host.state_dir)
    for attack in (
        "kill -TERM 1; kill -HUP 1; kill -INT 1; echo survived",
        f"kill -9 {init}; kill -STOP {init}; echo tried",
        "kill -9 1; kill -9 -1",
        "python3 -c 'import os, signal\nfor pid in range(1, 4096): \n"
        "    try: os.kill(pid, signal.SIGKILL)\n    except OSError: pass'",
    ):
        await shell(client, host.workspace, attack)
        assert inits(host.state_dir) == [init], attack
    after = await shell(client, host.workspace, "cat /tmp/kept")
    assert (after.stdout, after.stderr) == ("kept\n", "")


async def test_a_command_holds_no_descriptor_of_the_channel_to_write_to(
    client: Client, sandbox: None, host: Host
) -> None:
    await shell(client, host.workspace, "echo kept > /tmp/kept")
    writer = (
        "python3 -c '\n"
        "import os\n"
        "written = 0\n"
        "for fd in range(3, 1024):\n"
        "    try:\n"
        '        os.write(fd, b"{\\"op\\": \\"run\\"}")\n'
        "        written += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print(written)\n"
        "'; ls /proc/self/fd"
    )
    result = await shell(client, host.workspace, writer)
    assert result.stdout.split() == ["0", "0", "1", "2", "3"]  # none written; 3: ls's own
    after = await shell(client, host.workspace, "cat /tmp/kept")
    assert after.stdout == "kept\n"


# --- nothing of one command reaches the next -------------------------------------------


async def test_a_daemon_a_command_leaves_is_gone_for_the_next(
    client: Client, sandbox: None, host: Host
) -> None:
    duration = unique_duration()
    daemon = (
        "python3 -c '\n"
        "import os, socket, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        's.bind(("127.0.0.1", 4444)); s.listen()\n'
        'open("/tmp/daemon.pid", "w").write(str(os.getpid()))\n'
        "time.sleep(3600)\n"
        "'"
    )
    first = await shell(
        client,
        host.workspace,
        f"setsid sleep {duration} & nohup sleep {duration} >/dev/null 2>&1 & "
        f"(sleep {duration} &) ; {daemon}; "
        "while [ ! -s /tmp/daemon.pid ]; do sleep 0.01; done; echo started",
    )
    assert first.stdout == "started\n"
    assert sleeping(duration) == []  # gone on the host the moment the command ended
    second = await shell(
        client,
        host.workspace,
        "ps -eo pid,args; grep -q SO_REUSEADDR /proc/$(cat /tmp/daemon.pid)/cmdline "
        "2>/dev/null && echo alive; "
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 4444))' "
        "2>/dev/null && echo connected; echo done",
    )
    lines = second.stdout.splitlines()
    assert not [line for line in lines if line.split()[1:2] == ["sleep"]]
    assert "alive" not in lines
    assert "connected" not in lines
    assert lines[-1] == "done"


async def test_a_full_tmp_leaves_the_next_command_running(
    client: Client, sandbox: None, host: Host
) -> None:
    first = await shell(
        client, host.workspace, "head -c 400M /dev/zero > /tmp/fill; stat -c %s /tmp/fill"
    )
    assert "No space left on device" in first.stderr
    assert int(first.stdout) <= WARM_TMP_BYTES  # the bound: a 256 MiB tmpfs per session
    second = await shell(client, host.workspace, "echo runs; rm /tmp/fill && echo freed")
    assert (second.exit_status, second.stdout) == (0, "runs\nfreed\n")


async def test_another_sessions_warm_sandbox_shows_nothing_of_this_one(
    client: Client, sandbox: None, host: Host
) -> None:
    await shell(client, host.workspace, "echo mine > /tmp/a-secret; export MINE=1; true")
    other = owned(host.root / "workspace-b")
    host.before |= {"workspace-b", "workspace-b/.git"}
    for probe, answer in (
        ("ls -A /tmp", ""),
        ("cat /tmp/a-secret 2>/dev/null || echo absent", "absent\n"),
        ("cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -c MINE", "0\n"),
        ("ps -eo comm= | grep -cvxE 'sh|ps|grep'", "0\n"),  # only its own processes
    ):
        seen = await shell(client, other, probe, session="bbbbbbbbbbbbbbbb")
        assert seen.stdout == answer, probe
    assert len(inits(host.state_dir)) == 2  # two warm sandboxes, one per session
    mine = await shell(client, host.workspace, "cat /tmp/a-secret; echo $MINE")
    assert mine.stdout == "mine\n\n"  # its /tmp kept; its shell variable died with it


# --- through the backend: secrets, a killed init ----------------------------------------


@pytest.fixture
async def backend(host: Host) -> AsyncIterator[BwrapBackend]:
    made = BwrapBackend(state_dir=host.state_dir)
    try:
        yield made
    finally:
        await made.aclose()


def spec(host: Host, **fields: object) -> SandboxSpec:
    return SandboxSpec(
        workspace=host.workspace,
        session_id=SESSION,
        hidden=(host.state_dir,),
        **fields,  # type: ignore[arg-type]
    )


async def test_a_leased_secret_or_variable_of_one_command_is_unseen_by_the_next(
    backend: BwrapBackend, host: Host
) -> None:
    duration = unique_duration()
    leased = spec(host, secret_environment=(("TOKEN", SECRET_VALUE),))
    first = await backend.run(
        leased, f"echo $TOKEN; export LEFT=over; (sleep {duration} &); echo $TOKEN > /dev/null"
    )
    assert first.stdout == f"{SECRET_VALUE}\n"
    second = await backend.run(
        spec(host), "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; ls /proc"
    )
    assert SECRET_VALUE not in second.stdout
    assert "TOKEN" not in second.stdout
    assert "LEFT" not in second.stdout
    assert sleeping(duration) == []
    [init] = inits(host.state_dir)
    environ = Path(f"/proc/{init}/environ").read_bytes()  # noqa: ASYNC240
    assert SECRET_VALUE.encode() not in environ  # the init's environment never held it


async def test_an_init_killed_between_commands_gives_a_fresh_sandbox_saying_so(
    backend: BwrapBackend, host: Host
) -> None:
    await backend.run(spec(host), "echo x > /tmp/before")
    [init] = inits(host.state_dir)
    os.kill(init, signal.SIGKILL)
    # Every process of the sandbox gone (its outer bwrap last, once the init is): the
    # session's next command comes between two commands.
    await until(lambda: not marked_pids(marker(host.state_dir)), "the sandbox did not end")
    result = await backend.run(spec(host), "ls -A /tmp; echo ran")
    assert result.stdout == "ran\n"  # a fresh sandbox, /tmp empty
    assert "this session's sandbox had ended" in result.stderr
    [fresh] = inits(host.state_dir)
    assert fresh != init


async def test_an_init_killed_during_a_command_fails_that_call_and_not_the_next(
    backend: BwrapBackend, host: Host
) -> None:
    await backend.run(spec(host), "true")
    [init] = inits(host.state_dir)

    async def kill_soon() -> None:
        await until((host.workspace / "running").exists, "the command did not start")
        os.kill(init, signal.SIGKILL)

    failed: list[SandboxFailed] = []

    async def call() -> None:
        try:
            await backend.run(spec(host), "touch running; sleep 30")
        except SandboxFailed as error:
            failed.append(error)

    async with anyio.create_task_group() as group:
        group.start_soon(kill_soon)
        group.start_soon(call)
    [error] = failed
    assert error.code == codes.SANDBOX_FAILED
    assert "ended while this command ran" in error.message
    (host.workspace / "running").unlink()
    after = await backend.run(spec(host), "echo again")
    assert (after.exit_status, after.stdout) == (0, "again\n")


async def test_a_timed_out_command_in_a_warm_sandbox_leaves_it_serving(
    backend: BwrapBackend, host: Host
) -> None:
    duration = unique_duration()
    await backend.run(spec(host), "echo kept > /tmp/kept")
    slow = spec(host, limits=Limits(wall_s=0.5))
    result = await backend.run(slow, f"(sleep {duration} &); sleep {duration}")
    assert result.ended == "timeout"
    assert sleeping(duration) == []
    after = await backend.run(spec(host), "cat /tmp/kept")
    assert after.stdout == "kept\n"


async def test_a_cold_sandbox_of_the_service_carries_the_marker_and_is_swept(
    backend: BwrapBackend, host: Host
) -> None:
    duration = unique_duration()
    results: list[ExecResult] = []
    cold = SandboxSpec(workspace=host.workspace, hidden=(host.state_dir,))  # no session

    async def run_cold() -> None:
        results.append(await backend.run(cold, f"sleep {duration}"))

    async with anyio.create_task_group() as group:
        group.start_soon(run_cold)
        await until(lambda: sleeping(duration), "the command did not start")
        assert inits(host.state_dir) == []  # no warm sandbox: a cold one...
        assert marked_pids(marker(host.state_dir))  # ...found by its pid 1's name
        sweep_marked(host.state_dir)
    [result] = results
    assert result.exit_status != 0
    assert sleeping(duration) == []


# --- a killed service, an idle timeout ----------------------------------------------------


async def test_a_restarted_service_ends_what_a_killed_one_left(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, host: Host
) -> None:
    # A service killed with -9 mid-spawn leaves an outer bwrap, parent 1, stuck in its
    # setup: a process with the sandbox's marker, and its pidfile.
    script = "import os, sys, time\nif os.fork(): os._exit(0)\nos.setsid()\ntime.sleep(3600)\n"
    mark = marker(host.state_dir)
    await anyio.run_process(
        [sys.executable, "-c", script, "bwrap-stand-in", mark],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    await until(lambda: marked_pids(mark), "the stand-in did not start")
    [stuck] = marked_pids(mark)
    pidfiles = host.state_dir / "sandboxes"
    pidfiles.mkdir()
    (pidfiles / f"{stuck}.pid").write_text(f"{stuck}\n")
    async with run_service(sandbox_service, settings):
        assert marked_pids(mark) == []  # swept at start
        result = await shell(client, host.workspace, "echo works")
        assert result.stdout == "works\n"
        assert len(inits(host.state_dir)) == 1
    assert marked_pids(mark) == []  # and at shutdown
    assert not pidfiles.exists()


_HOLDER = """
import anyio, sys
from pathlib import Path
from bastion.shared.sandboxing import BwrapBackend, SandboxSpec

async def main() -> None:
    state = Path(sys.argv[2])
    backend = BwrapBackend(state_dir=state)
    spec = SandboxSpec(workspace=Path(sys.argv[1]), session_id="c" * 16, hidden=(state,))
    await backend.run(spec, "sleep " + sys.argv[3])

anyio.run(main)
"""
"""A service's process in miniature: a warm sandbox running a command, to be killed -9."""


async def test_a_service_killed_mid_command_leaves_nothing_a_restart_does_not_end(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, host: Host
) -> None:
    duration = unique_duration()
    holder = await anyio.open_process(
        [sys.executable, "-c", _HOLDER, str(host.workspace), str(host.state_dir), duration]
    )
    try:
        await until(lambda: sleeping(duration), "the command did not start")
        os.kill(holder.pid, signal.SIGKILL)
    finally:
        await holder.aclose()
    # Its sandbox dies with it (the channel closes, bwrap dies with its parent) and a
    # restarted service ends whatever might be left and removes the stale pidfile.
    await until(lambda: sleeping(duration) == [], "the killed service's command lives on")
    assert list((host.state_dir / "sandboxes").glob("*.pid"))  # stale, left by the kill
    async with run_service(sandbox_service, settings):
        assert marked_pids(marker(host.state_dir)) == []
        assert list((host.state_dir / "sandboxes").glob("*.pid")) == []
        result = await shell(client, host.workspace, "echo works")
        assert result.stdout == "works\n"
    assert marked_pids(marker(host.state_dir)) == []


async def test_an_idle_sandbox_closes_and_the_next_call_says_so(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, host: Host
) -> None:
    quick = SandboxSettings(
        nats_url=settings.nats_url, state_dir=settings.state_dir, sandbox_idle_s=0.4
    )
    async with run_service(sandbox_service, quick):
        await shell(client, host.workspace, "echo x > /tmp/before")
        await until(lambda: inits(host.state_dir) == [], "the idle sandbox was not closed")
        result = await shell(client, host.workspace, "ls -A /tmp; echo ran")
        assert result.stdout == "ran\n"
        assert "closed after 0.4 s without a command" in result.stderr


async def test_a_call_the_init_could_not_serve_is_a_typed_error_through_the_bus(
    client: Client, sandbox: None, host: Host
) -> None:
    await shell(client, host.workspace, "true")
    [init] = inits(host.state_dir)

    async def kill_soon() -> None:
        await until((host.workspace / "running").exists, "the command did not start")
        os.kill(init, signal.SIGKILL)

    failed: list[RemoteError] = []

    async def call() -> None:
        try:
            await shell(client, host.workspace, "touch running; sleep 30")
        except RemoteError as error:
            failed.append(error)

    async with anyio.create_task_group() as group:
        group.start_soon(kill_soon)
        group.start_soon(call)
    [error] = failed
    assert error.code == codes.SANDBOX_FAILED
    assert "run it again" in error.message
    (host.workspace / "running").unlink()
    after = await shell(client, host.workspace, "echo again")
    assert after.stdout == "again\n"


# --- a command that frees its pid 1 from its leader (ptrace) ------------------------------

_UNTIE = """\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
names = "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags"
names += " rsp ss fs_base gs_base ds es fs gs"
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in names.split()]
def check(result):
    if result == -1:
        raise OSError(ctypes.get_errno(), "ptrace")
check(libc.ptrace(16, 1, None, None))  # PTRACE_ATTACH pid 1 (same uid, dumpable)
os.waitpid(1, 0x40000000)
saved = Regs()
check(libc.ptrace(12, 1, None, ctypes.byref(saved)))
assert libc.ptrace(1, 1, ctypes.c_void_p(saved.rip - 2), None) & 0xFFFF == 0x050F  # syscall
regs = Regs()
ctypes.memmove(ctypes.byref(regs), ctypes.byref(saved), ctypes.sizeof(Regs))
regs.rax, regs.orig_rax, regs.rip, regs.rdi, regs.rsi = 157, 2**64 - 1, saved.rip - 2, 1, 0
check(libc.ptrace(13, 1, None, ctypes.byref(regs)))  # prctl(PR_SET_PDEATHSIG, 0)
check(libc.ptrace(9, 1, None, None))
os.waitpid(1, 0x40000000)
check(libc.ptrace(12, 1, None, ctypes.byref(regs)))
assert regs.rax == 0, regs.rax
check(libc.ptrace(13, 1, None, ctypes.byref(saved)))
check(libc.ptrace(17, 1, None, None))
print("untied")
"""
"""The attacker's `inj.py`: pid 1 of the command's namespace, traced, clears its own
`PR_SET_PDEATHSIG`, so it no longer dies with the process that started it."""


_X86_64 = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the tracing attack is written for x86-64 registers"
)


def _untie(workspace: Path) -> None:
    script = workspace / "untie.py"
    script.write_text(_UNTIE)
    os.chown(script, 1000, 1000)


def _repo(workspace: Path) -> None:
    """A git repository the owner made, with one commit."""
    for args in (("init", "-q"), ("commit", "-q", "--allow-empty", "-m", "first")):
        subprocess.run(
            ["git", "-c", "safe.directory=*", "-c", "user.name=o", "-c", "user.email=o@o", *args],
            cwd=workspace,
            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"},
            check=True,
        )
    owned(workspace)


@pytest.fixture(params=[True, False], ids=["cgroups", "no-cgroups"])
async def either(host: Host, request: pytest.FixtureRequest) -> AsyncIterator[BwrapBackend]:
    """A backend with per-command cgroups, and one without (`BASTION_CGROUPS=false`)."""
    made = BwrapBackend(state_dir=host.state_dir, cgroups=request.param)
    try:
        yield made
    finally:
        await made.aclose()


@_X86_64
@pytest.mark.parametrize("session", [SESSION, ""], ids=["warm", "cold"])
async def test_an_untied_pid_1_and_its_daemon_are_dead_when_the_timed_out_call_returns(
    either: BwrapBackend, host: Host, session: str
) -> None:
    duration = unique_duration()
    _untie(host.workspace)
    slow = dataclasses.replace(spec(host, limits=Limits(wall_s=3.0)), session_id=session)
    result = await either.run(
        slow,
        f"python3 untie.py && (exec >/dev/null 2>&1; sleep {duration}) & sleep 100",
    )
    assert result.ended == "timeout"
    assert "untied" in result.stdout, result.stderr  # the attack itself worked...
    assert sleeping(duration) == []  # ...and nothing of the command outlived the call
    after = await either.run(spec(host), "echo next")
    assert after.stdout == "next\n"


@_X86_64
@pytest.mark.parametrize("session", [SESSION, ""], ids=["warm", "cold"])
async def test_a_commondir_an_untied_loop_puts_back_is_swept_after_it_is_dead(
    either: BwrapBackend, host: Host, session: str
) -> None:
    _repo(host.workspace)
    _untie(host.workspace)
    mark = f"bastion-loop-{unique_duration()}"
    loop = (
        'python3 -c \'import os\nwhile True:\n    try: os.link(".git/cd.tmp", ".git/commondir")'
        f"\n    except OSError: pass' {mark}"
    )
    slow = dataclasses.replace(spec(host, limits=Limits(wall_s=3.0)), session_id=session)
    result = await either.run(
        slow,
        "python3 untie.py && echo ../evil > .git/cd.tmp && "
        f"for i in 1 2 3; do (exec >/dev/null 2>&1; {loop}) & done; sleep 100",
    )
    assert result.ended == "timeout"
    assert "untied" in result.stdout, result.stderr
    assert marked_pids(mark) == []  # every loop was dead before the sweep...
    assert "the command made .git/commondir" in result.stderr
    assert not (host.workspace / ".git/commondir").exists()  # ...so none put it back


# --- /dev/shm, System V IPC and keyrings are each command's own ----------------------------


async def test_dev_shm_is_empty_for_each_command_and_bounded(
    backend: BwrapBackend, host: Host
) -> None:
    first = await backend.run(
        spec(host),
        "echo left > /dev/shm/left; head -c 100M /dev/zero > /dev/shm/fill; "
        "stat -c %s /dev/shm/fill",
    )
    assert "No space left on device" in first.stderr
    assert int(first.stdout) <= WARM_SHM_BYTES  # a bounded tmpfs, not half the RAM
    second = await backend.run(spec(host), "ls -A /dev/shm; echo listed")
    assert second.stdout == "listed\n"  # a fresh one: nothing of the first is there


async def test_dev_itself_is_read_only_in_a_warm_sandbox(backend: BwrapBackend, host: Host) -> None:
    result = await backend.run(
        spec(host), "touch /dev/kept 2>/dev/null || echo refused; ls /dev/kept 2>/dev/null"
    )
    assert result.stdout == "refused\n"


_SHMGET = (
    "python3 -c '\n"
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.shmat.restype = ctypes.c_void_p\n"
    "segment = libc.shmget(0, 4000000, 0o1600)\n"
    "assert segment >= 0\n"
    "ctypes.memset(libc.shmat(segment, None, 0), 7, 4000000)\n"
    'print("made")\n'
    "'"
)


async def test_a_system_v_segment_of_one_command_is_gone_for_the_next(
    backend: BwrapBackend, host: Host
) -> None:
    first = await backend.run(spec(host), f"{_SHMGET}; tail -n +2 /proc/sysvipc/shm | wc -l")
    assert first.stdout == "made\n1\n"  # the segment outlives its process...
    second = await backend.run(spec(host), "tail -n +2 /proc/sysvipc/shm | wc -l")
    assert second.stdout == "0\n"  # ...but not its command: an IPC namespace per command


_KEYS = (
    "python3 -c '\n"
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    'if sys.argv[1] == "add":\n'
    "    for keyring in (-3, -4, -5):\n"  # session, user, user-session
    '        assert libc.syscall(248, b"user", b"kept", b"value", 5, keyring) > 0\n'
    "found = 0\n"
    "for keyring in (-3, -4, -5):\n"  # KEYCTL_SEARCH of each for the key
    '    found += libc.syscall(250, 10, keyring, b"user", b"kept", 0) > 0\n'
    "print(found)\n"
    "' "
)


async def test_a_key_one_command_adds_is_not_in_the_next_commands_keyrings(
    backend: BwrapBackend, host: Host
) -> None:
    first = await backend.run(spec(host), _KEYS + "add")
    assert first.stdout != "0\n", first.stderr  # the key is there for its own command
    second = await backend.run(spec(host), _KEYS + "look")
    assert second.stdout == "0\n", second.stderr


_PERSISTENT = (
    "python3 -c '\n"
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "persistent = libc.syscall(250, 22, ctypes.c_long(-1), ctypes.c_long(-3))\n"  # GET_PERSISTENT
    'if persistent < 0: print("none"); sys.exit()\n'
    'if sys.argv[1] == "add":\n'
    "    for n in range(20):\n"  # keys the host user's quota counts
    '        assert libc.syscall(248, b"user", b"k%d" % n, b"x" * 500, 500, persistent) > 0\n'
    'print(libc.syscall(250, 10, persistent, b"user", b"k0", 0) > 0)\n'  # KEYCTL_SEARCH
    "' "
)


async def test_keys_one_command_puts_in_the_persistent_keyring_are_gone_for_the_next(
    backend: BwrapBackend, host: Host
) -> None:
    """The persistent keyring outlives processes; its keys count against the host user's
    key quota, so one command filling it would starve the next and other sessions."""
    first = await backend.run(spec(host), _PERSISTENT + "add")
    if first.stdout == "none\n":
        pytest.skip("this kernel has no persistent keyrings")
    assert first.stdout == "True\n", first.stderr
    second = await backend.run(spec(host), _PERSISTENT + "look")
    assert second.stdout == "False\n", second.stderr


# --- what a service killed with -9 leaves in the cgroup tree ------------------------------


async def test_a_restarted_service_removes_the_empty_cgroups_a_killed_one_left(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, host: Host
) -> None:
    root = find_cgroup_root()
    if root is None:
        pytest.skip("no cgroup this service may write: no per-command groups to leave")
    gone = subprocess.Popen(["true"])  # noqa: ASYNC220 (reaped at once, below)
    gone.wait()
    dead = gone.pid  # a pid no process has: the killed service's
    left = [root.pids / f"{cgroup_prefix(dead)}0123456789ab"]
    if root.cpu is not None:
        left.append(root.cpu / f"{cgroup_prefix(dead)}tenant-default")
        left.append(left[-1] / f"{cgroup_prefix(dead)}ba9876543210")
    live = subprocess.Popen(["sleep", unique_duration()])  # noqa: ASYNC220 (killed below)
    kept = root.pids / f"{cgroup_prefix(live.pid)}0123456789ab"  # a live service's: left
    for group in [*left, kept]:
        group.mkdir()
    try:
        async with run_service(sandbox_service, settings):
            assert [group for group in left if group.exists()] == []
            assert kept.is_dir()
            result = await shell(client, host.workspace, "echo works")
            assert result.stdout == "works\n"
    finally:
        live.kill()
        live.wait()
        for group in [*reversed(left), kept]:
            with contextlib.suppress(OSError):
                group.rmdir()
