"""How a stdio server's process starts: its command line, environment and directory.

`none` runs the command as the service's user with a scrubbed environment, in its
directory. `bwrap` runs it in the same sandbox as the shell (`bastion.shared.sandboxing`):
uid 10001, which on the host is never root (a root service drops to its directory's owner,
or to nobody, 65534, for a server without one; a root-owned directory is refused), the
system read-only, its directory at /workspace (an empty temporary one if it has none),
`read_only_dirs` shown read-only at their own paths, no network unless `sandbox_network`
is `host`, a cgroup of its own where the service may make one, and `prlimit` bounds.
The variables the spec names reach it through bwrap's `--args` pipe, never on a command
line. `docker:<image>@sha256:…` runs it with `docker run -i` in a
container of that image (never pulled): its directory at /workspace, run as the
directory's owner (never root), a read-only root, no capabilities, no new privileges,
memory and process limits, the network `none` unless an operator's network is named; the
container is removed when the connection ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio

from bastion.mcp.gateway.upstream.errors import UpstreamUnreachable
from bastion.proto.mcp import McpServerSpec
from bastion.proto.sandbox import Limits
from bastion.shared.errors import InvalidInput, NotImplementedYet
from bastion.shared.sandboxing.argv import bwrap_argv, filled_pipes, prlimit_argv, secret_args
from bastion.shared.sandboxing.cgroup import CommandCgroup, find_cgroup_root
from bastion.shared.sandboxing.docker_target import DockerTarget, parse_docker_backend
from bastion.shared.sandboxing.errors import SandboxFailed
from bastion.shared.sandboxing.etc import generated_etc
from bastion.shared.sandboxing.hostids import HostIds, drop_argv, sandbox_ids
from bastion.shared.sandboxing.spec import Network, SandboxSpec

__all__ = ["SERVER_LIMITS", "Launch", "launching", "server_environment"]

PASSED_THROUGH: Final = ("PATH", "HOME", "LANG", "TMPDIR")
"""The service's own variables an unsandboxed server gets, besides those its spec names."""

SERVER_LIMITS: Final = Limits(wall_s=86400.0, cpu_s=86400)
"""A server lives as long as its connection: no wall clock or CPU budget of a command,
the rest (memory, address space, file size, processes) as the shell's."""

_LAUNCHER_ENV: Final = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
NOBODY: Final = HostIds(65534, 65534)
"""Who a root service runs a bwrap-sandboxed server without a directory as."""


@dataclass(frozen=True)
class Launch:
    """A process ready to start: `pass_fds` must reach it; `status_fd` is bwrap's report."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    pass_fds: tuple[int, ...] = ()
    status_fd: int | None = None
    """The read end of bwrap's `--json-status-fd`: `child-pid` in it proves the sandbox
    started."""


def server_environment(spec: McpServerSpec, values: Mapping[str, str]) -> dict[str, str]:
    """The variables the spec names, from `values`; a name without a value is left out."""
    return {name: values[name] for name in spec.env if name in values}


def _directory(spec: McpServerSpec) -> Path | None:
    if spec.directory is None:
        return None
    directory = Path(spec.directory).expanduser().resolve()
    if not directory.is_dir():
        raise UpstreamUnreachable(
            f"the MCP server's directory {spec.directory} is not a directory here: "
            "create it, or give the server another directory"
        )
    return directory


def _network(spec: McpServerSpec) -> Network:
    if spec.sandbox_network in ("none", "host"):
        return "none" if spec.sandbox_network == "none" else "host"
    raise NotImplementedYet(
        f"a sandboxed MCP server takes the network none or host for now, not "
        f"{spec.sandbox_network}: give one of those"
    )


def _unsandboxed(spec: McpServerSpec, values: Mapping[str, str]) -> Launch:
    directory = _directory(spec)
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env |= server_environment(spec, values)
    return Launch(list(spec.command), env, str(directory) if directory else None)


def _read_only(spec: McpServerSpec) -> tuple[Path, ...]:
    dirs: list[Path] = []
    for given in spec.read_only_dirs:
        path = Path(given).expanduser().resolve()
        if not path.is_dir():
            raise UpstreamUnreachable(
                f"{given}, to be shown read-only in the MCP server's sandbox, is not a "
                "directory here: give an existing directory"
            )
        dirs.append(path)
    return tuple(dirs)


def _host_ids(directory: Path | None, empty: Path) -> HostIds | None:
    """The host user the server's sandbox runs as: its directory's owner when the service
    is root (nobody for a server without one, its empty directory given to nobody)."""
    if directory is None:
        if os.geteuid() != 0:
            return None
        os.chown(empty, NOBODY.uid, NOBODY.gid)
        return NOBODY
    try:
        return sandbox_ids(
            directory, None, f"the MCP server's directory {directory}", settable=False
        )
    except SandboxFailed as refused:
        raise UpstreamUnreachable(refused.message) from None


@asynccontextmanager
async def _sandboxed(spec: McpServerSpec, values: Mapping[str, str]) -> AsyncIterator[Launch]:
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    setpriv = shutil.which("setpriv")
    if bwrap is None or prlimit is None or setpriv is None:
        raise UpstreamUnreachable(
            "the MCP server is to run in bubblewrap, which is not installed here (bwrap, "
            "prlimit and setpriv): install bubblewrap and util-linux, or run the server "
            "with sandbox none"
        )
    network = _network(spec)
    directory = _directory(spec)
    with tempfile.TemporaryDirectory(prefix="bastion-mcp-") as empty:
        workspace = directory or Path(empty)
        sandbox = SandboxSpec(
            workspace=workspace,
            network=network,
            limits=SERVER_LIMITS,
            read_only=_read_only(spec),
            host_ids=_host_ids(directory, Path(empty)),
        )
        data = generated_etc(network)
        variables = list(server_environment(spec, values).items())
        options = secret_args(variables) if variables else b""
        root = find_cgroup_root()
        cgroup = None
        if root is not None:
            try:
                cgroup = CommandCgroup(root, SERVER_LIMITS)
            except OSError:
                cgroup = None
        status_read, status_write = os.pipe()
        try:
            contents = [file.content for file in data] + ([options] if options else [])
            with filled_pipes(contents) as fds:
                data_fds = fds[: len(data)]
                args_fd = fds[len(data)] if options else None
                argv = (
                    (cgroup.join_argv() if cgroup else [])
                    + prlimit_argv(prlimit, SERVER_LIMITS, nproc=cgroup is None)
                    + drop_argv(setpriv, sandbox.host_ids)
                    + bwrap_argv(
                        bwrap,
                        sandbox,
                        list(spec.command),
                        status_fd=status_write,
                        data_fds=[(fd, file.path) for fd, file in zip(data_fds, data, strict=True)],
                        args_fd=args_fd,
                    )
                )
                yield Launch(
                    argv,
                    dict(_LAUNCHER_ENV),
                    None,
                    pass_fds=(*fds, status_write),
                    status_fd=status_read,
                )
        finally:
            for fd in (status_read, status_write):
                os.close(fd)
            if cgroup is not None:
                with anyio.CancelScope(shield=True):
                    await cgroup.aclose()


DOCKER_MEMORY: Final = "512m"
DOCKER_PIDS: Final = "256"


async def _image_id(docker: str, target: DockerTarget) -> str:
    """The local image's ID: the pinned reference is never pulled."""
    for reference in (target.reference, target.digest):
        found = await anyio.run_process(
            [docker, "image", "inspect", "--format", "{{.Id}}", reference],
            check=False,
            env=dict(_LAUNCHER_ENV) | _docker_env(),
        )
        if found.returncode == 0:
            return found.stdout.decode().strip()
    raise UpstreamUnreachable(
        f"the Docker image {target.reference} is not on this machine, and Bastion never "
        "pulls one: load or build it here first"
    )


def _docker_env() -> dict[str, str]:
    """What the docker command needs of the service's environment to find its engine."""
    return {k: os.environ[k] for k in ("DOCKER_HOST", "DOCKER_CONFIG", "HOME") if k in os.environ}


def _container_user(directory: Path | None) -> str:
    if directory is None:
        return "65534:65534"
    info = directory.stat()
    if info.st_uid == 0:
        raise UpstreamUnreachable(
            f"the MCP server's directory {directory} belongs to root, and a Docker sandbox "
            "runs the server as its directory's owner, never as root: chown it to an "
            "unprivileged user"
        )
    return f"{info.st_uid}:{info.st_gid}"


@asynccontextmanager
async def _in_docker(spec: McpServerSpec, values: Mapping[str, str]) -> AsyncIterator[Launch]:
    docker = shutil.which("docker")
    if docker is None:
        raise UpstreamUnreachable(
            "the MCP server is to run in a Docker sandbox, but the docker command is not "
            "installed here: install it (docker.io), or run the server in bwrap"
        )
    try:
        target = parse_docker_backend(spec.sandbox, spec.sandbox_network)
    except InvalidInput as refused:
        raise UpstreamUnreachable(refused.message) from None
    directory = _directory(spec)
    image = await _image_id(docker, target)
    name = f"bastion-mcp-{secrets.token_hex(6)}"
    argv = [
        docker, "run", "--interactive", "--rm", "--pull", "never", "--name", name,
        "--label", "io.bastion.mcp=server", "--network", target.network, "--read-only",
        "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--user", _container_user(directory),
        "--memory", DOCKER_MEMORY, "--pids-limit", DOCKER_PIDS, "--workdir", "/workspace",
    ]  # fmt: skip
    if directory is not None:
        argv += ["--mount", f"type=bind,src={directory},dst=/workspace"]
    else:
        argv += ["--tmpfs", "/workspace:rw,nosuid,nodev,size=64m,mode=1777"]
    for path in _read_only(spec):
        argv += ["--mount", f"type=bind,src={path},dst={path},readonly"]
    variables = server_environment(spec, values)
    for variable in variables:
        argv += ["--env", variable]  # the value from the docker command's environment
    argv += [image, *spec.command]
    try:
        yield Launch(argv, dict(_LAUNCHER_ENV) | _docker_env() | variables, None)
    finally:
        with anyio.CancelScope(shield=True):
            # `--rm` removes it once it stops; a server that ignores its closed input
            # does not stop, so the container is removed whatever it does.
            await anyio.run_process(
                [docker, "rm", "--force", name],
                check=False,
                env=dict(_LAUNCHER_ENV) | _docker_env(),
            )


@asynccontextmanager
async def launching(spec: McpServerSpec, values: Mapping[str, str]) -> AsyncIterator[Launch]:
    """How to start the server `spec` describes; what it needed is cleaned up on exit.

    Raises:
        UpstreamUnreachable: its directory is missing, bubblewrap or docker is not
            installed, or its Docker image is not here.
        NotImplementedYet: a bwrap network other than none or host.
    """
    if not spec.command:
        raise UpstreamUnreachable(
            "the MCP server has no command to start: give the program and its arguments"
        )
    if spec.sandbox == "none":
        yield _unsandboxed(spec, values)
    elif spec.sandbox == "bwrap":
        async with _sandboxed(spec, values) as launch:
            yield launch
    else:
        async with _in_docker(spec, values) as launch:
            yield launch
