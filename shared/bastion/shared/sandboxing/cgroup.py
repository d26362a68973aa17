"""A cgroup per command: a bound on its processes and its memory, and which one it hit.

A fork bomb must not reach the host's process table, and a command that eats memory must
end with a reason rather than take the machine with it. `RLIMIT_NPROC` cannot do the first
job here: it counts every process of the *host* user the sandbox maps to (the service's
own, and every other sandbox's), and the kernel does not enforce it at all for root. So
each command gets its own cgroup, made beside the service's own and removed after:

- cgroup v2 when the service's cgroup is writable and already enables `pids` and `memory`
  for its children (systemd `Delegate=yes`, or a container given its own cgroup): one
  group with `pids.max`, `memory.max` (`memory.swap.max` 0), read back through
  `pids.events` and `memory.events`;
- else cgroup v1 when the `pids` and `memory` hierarchies are writable (the service runs
  as root on a hybrid host): the same limits as `pids.max`, `memory.limit_in_bytes`
  (and `memory.memsw.limit_in_bytes`), read back through `pids.events` and
  `memory.oom_control`.

A command run for a tenant also gets a CPU share: its group sits inside its tenant's
(`bastion-<pid>-tenant-<name>`, made on first use and removed once empty), and every
tenant's group has the same weight (`cpu.weight` on v2, `cpu.shares` on v1, which has a
`cpu` hierarchy of its own), so a tenant running many busy commands gets the same share of
a contended CPU as one running a single command, not many times more. Where the `cpu`
controller is not available the commands are bounded as before, without a share.

The launcher joins the group before it starts bwrap, so every process of the command is
in it from the first. When neither is available, `find_cgroup_root` answers None and the
backend falls back to `RLIMIT_NPROC` (see `argv.prlimit_argv`), whose limits are above.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import anyio

from bastion.proto.sandbox import Limits

__all__ = [
    "DEFAULT_CPU_WEIGHT",
    "CgroupRoot",
    "CommandCgroup",
    "cgroup_prefix",
    "find_cgroup_root",
    "remove_stale",
    "tenant_group_name",
]

CGROUP_MOUNT: Final = Path("/sys/fs/cgroup")
_REMOVE_TRIES: Final = 100
"""A group is removed once its last process is reaped: at most this many 20 ms polls."""
DEFAULT_CPU_WEIGHT: Final = 100
"""Every tenant's CPU weight (cgroup v2's scale, 1 to 10000; 100 is the kernel's default)."""


@dataclass(frozen=True)
class CgroupRoot:
    """Where per-command groups are made: one v2 directory, or the v1 pids and memory ones;
    `cpu` is where tenants' groups are made (None: the `cpu` controller is not ours), each
    with `cpu_weight`."""

    version: Literal[1, 2]
    pids: Path
    memory: Path
    cpu: Path | None = None
    cpu_weight: int = DEFAULT_CPU_WEIGHT

    def describe(self) -> str:
        """A few words for the operator: which cgroups bound a command."""
        share = f", CPU weight {self.cpu_weight} per tenant" if self.cpu is not None else ""
        if self.version == 2:
            return f"cgroup v2 under {self.pids}{share}"
        return f"cgroup v1 under {self.pids} and {self.memory}{share}"

    def cpu_setting(self) -> tuple[str, str]:
        """The file a tenant's group's weight is written to, and the value."""
        if self.version == 2:
            return "cpu.weight", str(self.cpu_weight)
        # v1's shares: 1024 is its default as 100 is v2's weight; 2 is its least.
        return "cpu.shares", str(max(2, self.cpu_weight * 1024 // DEFAULT_CPU_WEIGHT))


def _own_paths(proc_cgroup: Path) -> dict[str, str]:
    """The service's cgroup in each hierarchy, by controller (`""` for v2)."""
    paths: dict[str, str] = {}
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def find_cgroup_root(
    mount: Path = CGROUP_MOUNT,
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    cpu_weight: int = DEFAULT_CPU_WEIGHT,
) -> CgroupRoot | None:
    """The cgroups this service may make per-command groups in, or None when it may not."""
    own = _own_paths(proc_cgroup)
    if (mount / "cgroup.controllers").exists() and "" in own:
        here = mount / own[""].lstrip("/")
        try:
            enabled = (here / "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        if {"pids", "memory"} <= set(enabled) and _writable_dir(here):
            return CgroupRoot(2, here, here, here if "cpu" in enabled else None, cpu_weight)
        return None
    if "pids" in own and "memory" in own:
        pids = mount / "pids" / own["pids"].lstrip("/")
        memory = mount / "memory" / own["memory"].lstrip("/")
        cpu = mount / "cpu" / own["cpu"].lstrip("/") if "cpu" in own else None
        if _writable_dir(pids) and _writable_dir(memory):
            shared = cpu if cpu is not None and _writable_dir(cpu) else None
            return CgroupRoot(1, pids, memory, shared, cpu_weight)
    return None


def _count(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file, 0 when absent or unreadable."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_prefix(pid: int | None = None) -> str:
    """How the names of the cgroups a service process (this one by default) makes begin."""
    return f"bastion-{os.getpid() if pid is None else pid}-"


def _gone(pid: int) -> bool:
    """Whether no process has the pid `pid` (a service killed with -9, say)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def remove_stale(root: CgroupRoot) -> int:
    """Remove every empty group named after a service process that is gone (`cgroup_prefix`
    of a pid no process has: a service killed with -9 leaves its groups), a tenant's
    commands' groups first; how many were removed. A group still holding a process, or
    one of a live service, is left."""
    removed = 0
    for parent in {root.pids, root.memory, *([root.cpu] if root.cpu is not None else [])}:
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for group in entries:
            owner = group.name.split("-")
            if len(owner) < 3 or owner[0] != "bastion" or not owner[1].isdigit():
                continue
            if not group.is_dir() or not _gone(int(owner[1])):
                continue
            for inner in [*group.iterdir(), group]:
                if inner.is_dir():
                    with contextlib.suppress(OSError):
                        inner.rmdir()
                        removed += 1
    return removed


def tenant_group_name(tenant: str) -> str:
    """The name of a tenant's group, which its commands' groups are made in (a tenant is
    an identifier: letters, digits, `_`, `.` and `-`)."""
    return f"{cgroup_prefix()}tenant-{tenant}"


class CommandCgroup:
    """One command's group(s): made with its limits, joined by its launcher, then removed."""

    def __init__(self, root: CgroupRoot, limits: Limits, tenant: str | None = None) -> None:
        # Named after the service process that made it, so an operator (or a test) can
        # tell whose sandbox a cgroup is when several services share a host.
        name = f"{cgroup_prefix()}{secrets.token_hex(6)}"
        self._root = root
        self._tenant: Path | None = None
        if root.cpu is not None and tenant is not None:
            self._tenant = root.cpu / tenant_group_name(tenant)
        if root.version == 2:
            self._dirs = [(self._tenant or root.pids) / name]
        else:
            self._dirs = [root.pids / name, root.memory / name]
            if self._tenant is not None:
                self._dirs.append(self._tenant / name)
        self._made: list[Path] = []
        try:
            self._make_tenant_group()
            for directory in self._dirs:
                directory.mkdir()
                self._made.append(directory)
            self._write_limits(limits)
        except OSError:
            self.remove_now()
            raise

    def _make_tenant_group(self) -> None:
        """The tenant's group, made if missing, with the weight every tenant has (and, on
        v2, the controllers its commands' groups need)."""
        if self._tenant is None:
            return
        self._tenant.mkdir(exist_ok=True)
        if self._root.version == 2:
            (self._tenant / "cgroup.subtree_control").write_text("+pids +memory +cpu")
        setting, value = self._root.cpu_setting()
        (self._tenant / setting).write_text(value)

    @property
    def _pids(self) -> Path:
        return self._dirs[0]

    @property
    def _memory(self) -> Path:
        return self._dirs[0] if self._root.version == 2 else self._dirs[1]

    def _write_limits(self, limits: Limits) -> None:
        (self._pids / "pids.max").write_text(str(limits.processes))
        memory = str(limits.memory_bytes)
        if self._root.version == 2:
            (self._memory / "memory.max").write_text(memory)
            swap = self._memory / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
            return
        (self._memory / "memory.limit_in_bytes").write_text(memory)
        both = self._memory / "memory.memsw.limit_in_bytes"
        if both.exists():  # memory and swap together: no swapping past the limit
            both.write_text(memory)

    @property
    def _join_file(self) -> str:
        """The file a process writes `0` to to join a group: `cgroup.procs` on v2, `tasks` on
        v1. On v1 that moves the writing thread alone, which is the whole process for the
        single-threaded ones that join (the launcher's shell, a warm command's first
        process), and the kernel then takes no system-wide lock: a `cgroup.procs` write
        takes one, and waits for an RCU grace period to do so (5-20 ms) unless another
        migration took it moments before."""
        return "cgroup.procs" if self._root.version == 2 else "tasks"

    def join_argv(self) -> list[str]:
        """A launcher that moves itself into the group(s), then runs the rest of the argv.

        A launcher that cannot join exits 125 without starting anything.
        """
        joins = " && ".join(
            f"echo 0 > {shlex.quote(str(directory / self._join_file))}" for directory in self._dirs
        )
        return ["/bin/sh", "-c", f'{joins} || exit 125; exec "$@"', "bastion-cgroup"]

    def procs_fds(self) -> list[int]:
        """Each group's `cgroup.procs` (v1: `tasks`, `_join_file`), open for writing: a warm
        sandbox's init moves the command's first process in by writing `0` to each
        (`warm_init`)."""
        fds: list[int] = []
        try:
            for directory in self._dirs:
                fds.append(os.open(directory / self._join_file, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def limit_hit(self) -> str:
        """`oom` if the kernel killed a process for memory, `process_limit` if a fork was
        refused, else empty."""
        if self._root.version == 2:
            oom = _count(self._memory / "memory.events", "oom_kill")
        else:
            oom = _count(self._memory / "memory.oom_control", "oom_kill")
        if oom:
            return "oom"
        if _count(self._pids / "pids.events", "max"):
            return "process_limit"
        return ""

    def kill(self) -> None:
        """SIGKILL every process in the group(s) (`cgroup.kill` where the kernel has it)."""
        kill = self._pids / "cgroup.kill"
        if kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
                return
        for directory in self._made:
            with contextlib.suppress(OSError):
                for pid in (directory / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove_now(self) -> list[Path]:
        """Remove each group that is empty, and then the tenant's if no other command of it
        is in it; the ones still busy."""
        busy = []
        for directory in self._made:
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                busy.append(directory)
        self._made = busy
        if not busy and self._tenant is not None:
            with contextlib.suppress(OSError):  # another command of the tenant runs in it
                self._tenant.rmdir()
        return busy

    async def aclose(self) -> None:
        """Kill what is left in the group and remove it, once its processes are reaped."""
        for _ in range(_REMOVE_TRIES):
            self.kill()
            if not self.remove_now():
                return
            await anyio.sleep(0.02)
