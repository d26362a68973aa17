"""The one module that speaks to the (untyped) Docker SDK: blocking calls, typed results.

Every method blocks; callers run them in a worker thread with a deadline. Errors of the SDK
become `SandboxFailed` or `None` here, so nothing above this module sees them. The engine is
found as the `docker` command finds it: `DOCKER_HOST` (and `DOCKER_TLS_VERIFY`,
`DOCKER_CERT_PATH`), else the local socket.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import docker
import docker.errors
import docker.types
import requests.exceptions

from bastion.shared.sandboxing.errors import SandboxFailed

__all__ = [
    "LABEL_MANAGED",
    "ContainerConfig",
    "DockerEngine",
    "ExecOutput",
    "ImageInfo",
    "ReadOnlyMount",
]

LABEL_MANAGED: Final = "io.bastion.managed"
_DEFAULT_SOCKET: Final = "unix:///var/run/docker.sock"
_CONTROL_TIMEOUT_S: Final = 30
_PROBE_API_VERSION: Final = "1.24"
"""The oldest API the SDK speaks: enough to ask the engine which one it speaks."""


@dataclass(frozen=True)
class ImageInfo:
    """An image the engine has: its ID and the repository digests it is known by."""

    id: str
    repo_digests: tuple[str, ...]


@dataclass(frozen=True)
class ReadOnlyMount:
    """A read-only mount at `target` inside: the host path `source`, or an empty tmpfs
    (`writable`: a bind left writable, as the workspace's `.git` is, a mount point)."""

    target: str
    source: str | None = None
    writable: bool = False


@dataclass(frozen=True)
class ContainerConfig:
    """Everything a session's container is created with."""

    image_id: str
    command: Sequence[str]
    user: str
    workspace: str
    workdir: str
    environment: Mapping[str, str]
    network: str
    labels: Mapping[str, str]
    memory_bytes: int
    pids: int
    nano_cpus: int
    tmp_bytes: int
    cpu_s: int
    file_size_bytes: int
    read_only: Sequence[ReadOnlyMount] = ()
    """Mounted over the workspace's (read-write) one, in order."""
    hostname: str = "sandbox"
    extra: Mapping[str, Any] = field(default_factory=dict)


class ExecOutput:
    """The output of one started exec: (stdout, stderr) chunks, one of each pair `None`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._closed = threading.Event()

    def chunks(self) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Chunks until every process holding the exec's output has gone, or `close()`."""
        try:
            yield from self._stream
        except (OSError, ValueError, AttributeError, requests.exceptions.RequestException):
            if not self._closed.is_set():
                raise SandboxFailed(
                    f"the connection to the Docker engine at {engine_address()} broke while "
                    "a command ran: check the engine's log, then run the command again"
                ) from None

    def close(self) -> None:
        """Stop reading: `chunks()` ends in whichever thread runs it."""
        self._closed.set()
        # The engine may have closed the socket first: that is the end sought anyway. The
        # response holds the socket's file too, which must close for the socket to.
        with contextlib.suppress(Exception):
            self._stream.close()
        with contextlib.suppress(Exception):
            self._stream._response.close()


def engine_address() -> str:
    """Where the engine is looked for, for sentences that tell an operator what to fix."""
    return os.environ.get("DOCKER_HOST") or _DEFAULT_SOCKET


def _check_socket() -> None:
    """A local socket nobody listens on, found with a socket closed afterwards (the SDK's
    transport leaves its own open when the connection fails)."""
    address = engine_address()
    if not address.startswith("unix://"):
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(10)
        try:
            probe.connect(address.removeprefix("unix://"))
        except OSError:
            raise _unreachable() from None


def _api_version() -> str:
    """The engine's API version, asked with a client that is closed whatever happens (the
    SDK's own negotiation leaves a socket open when the engine does not answer)."""
    _check_socket()
    try:
        probe = docker.from_env(timeout=10, version=_PROBE_API_VERSION)
    except docker.errors.DockerException:
        raise _unreachable() from None
    try:
        return str(probe.api.version(api_version=False)["ApiVersion"])
    except (docker.errors.DockerException, requests.exceptions.RequestException, KeyError):
        raise _unreachable() from None
    finally:
        probe.close()


def _unreachable() -> SandboxFailed:
    return SandboxFailed(
        f"the Docker engine at {engine_address()} does not answer: start it (`dockerd`, or "
        "`systemctl start docker`), or set DOCKER_HOST to an engine that runs"
    )


@contextlib.contextmanager
def _engine_call(failed: str, *, gone_is_fine: bool = False) -> Iterator[None]:
    """The SDK's errors in the block as `SandboxFailed`: a refusal says the engine did not
    do `failed`, a broken connection that the engine does not answer. With `gone_is_fine`,
    a container that is gone (not found) or going (409: not running, or its removal under
    way) ends the block quietly: what follows it runs."""
    try:
        yield
    except docker.errors.APIError as error:
        if gone_is_fine and (isinstance(error, docker.errors.NotFound) or error.status_code == 409):
            return
        raise SandboxFailed(f"the Docker engine did not {failed}: {_explanation(error)}") from None
    except requests.exceptions.RequestException:
        raise _unreachable() from None


class DockerEngine:
    """One connection to one engine, opened on first use; its methods block."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: Any = None
        self._stream: Any = None

    def _clients(self) -> tuple[Any, Any]:
        """The client for short calls, and one without a read timeout for exec output
        (a command may print nothing for longer than any call should take)."""
        with self._lock:
            if self._control is None:
                version = _api_version()
                control = docker.from_env(timeout=_CONTROL_TIMEOUT_S, version=version)
                stream = docker.from_env(timeout=None, version=version, max_pool_size=64).api
                self._control, self._stream = control, stream
            return self._control, self._stream

    def _api(self) -> Any:
        return self._clients()[0].api

    def ping(self) -> str:
        """The engine's version, or `SandboxFailed` saying where it was looked for."""
        try:
            return str(self._clients()[0].version().get("Version", "unknown version"))
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            raise _unreachable() from None

    def image(self, reference: str) -> ImageInfo | None:
        """The image `reference` (`name@sha256:…` or an image ID) names, if the engine has it."""
        try:
            found = self._api().inspect_image(reference)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as error:
            if error.status_code in (400, 404):  # a reference the engine cannot parse
                return None
            raise _unreachable() from None
        except requests.exceptions.RequestException:
            raise _unreachable() from None
        return ImageInfo(id=str(found["Id"]), repo_digests=tuple(found.get("RepoDigests") or ()))

    def network_exists(self, name: str) -> bool:
        """Whether the engine has a network called `name`."""
        try:
            found = self._api().networks(names=[name])
        except requests.exceptions.RequestException:
            raise _unreachable() from None
        return any(network.get("Name") == name for network in found)

    def create(self, config: ContainerConfig) -> str:
        """Create and start a container (never pulling its image); its ID."""
        api = self._api()
        limit = docker.types.Ulimit
        host_config = api.create_host_config(
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={config.tmp_bytes}"},
            mem_limit=config.memory_bytes,
            memswap_limit=config.memory_bytes,
            pids_limit=config.pids,
            nano_cpus=config.nano_cpus,
            network_mode=config.network,
            ipc_mode="private",
            mounts=[
                docker.types.Mount(config.workdir, config.workspace, type="bind"),
                *(_read_only_mount(mount) for mount in config.read_only),
            ],
            ulimits=[
                limit(name="cpu", soft=config.cpu_s, hard=config.cpu_s + 1),
                limit(name="fsize", soft=config.file_size_bytes, hard=config.file_size_bytes),
            ],
            **config.extra,
        )
        with _engine_call("start the container"):
            created = api.create_container(
                config.image_id,
                command=list(config.command),
                user=config.user,
                working_dir=config.workdir,
                environment=dict(config.environment),
                labels=dict(config.labels),
                hostname=config.hostname,
                network_disabled=config.network == "none",
                host_config=host_config,
            )
            api.start(created["Id"])
        return str(created["Id"])

    def running(self, container_id: str) -> bool:
        """Whether the container exists and runs."""
        try:
            state = self._api().inspect_container(container_id)["State"]
        except docker.errors.NotFound:
            return False
        except requests.exceptions.RequestException:
            raise _unreachable() from None
        return bool(state.get("Running"))

    def containers(self, labels: Mapping[str, str]) -> list[str]:
        """IDs of every container, running or not, carrying all of `labels`."""
        wanted = [f"{key}={value}" for key, value in labels.items()]
        try:
            found = self._api().containers(all=True, filters={"label": wanted})
        except requests.exceptions.RequestException:
            raise _unreachable() from None
        return [str(container["Id"]) for container in found]

    def remove(self, container_id: str) -> None:
        """Kill and remove a container; one already gone is fine."""
        with _engine_call(f"remove container {container_id[:12]}", gone_is_fine=True):
            self._api().remove_container(container_id, force=True)

    def exec_create(
        self, container_id: str, argv: Sequence[str], user: str, workdir: str | None = None
    ) -> str | None:
        """A new exec of `argv` in the container (in `workdir`, else the container's), or
        `None` if the container is gone."""
        with _engine_call("run the command", gone_is_fine=True):
            created = self._api().exec_create(container_id, list(argv), user=user, workdir=workdir)
            return str(created["Id"])
        return None

    def exec_start(self, exec_id: str) -> ExecOutput:
        """Start an exec and return its output, demultiplexed."""
        with _engine_call("run the command"):
            stream = self._clients()[1].exec_start(exec_id, stream=True, demux=True)
        return ExecOutput(stream)

    def exec_exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code, or `None` while it runs (or if the engine lost it)."""
        try:
            found = self._api().exec_inspect(exec_id)
        except docker.errors.NotFound:
            return None
        except requests.exceptions.RequestException:
            raise _unreachable() from None
        if found.get("Running"):
            return None
        code = found.get("ExitCode")
        return int(code) if code is not None else None

    def close(self) -> None:
        """Close the connections; the next call opens them again."""
        with self._lock:
            for client in (self._control, self._stream):
                if client is not None:
                    client.close()
            self._control = self._stream = None


def _read_only_mount(mount: ReadOnlyMount) -> Any:
    if mount.source is None:
        return docker.types.Mount(mount.target, None, type="tmpfs", read_only=True)
    return docker.types.Mount(mount.target, mount.source, type="bind", read_only=not mount.writable)


def _explanation(error: Any) -> str:
    """The engine's own sentence, bounded: it names images, paths and limits, not secrets."""
    text = str(getattr(error, "explanation", "") or "").strip()
    return text[:300] or f"status {getattr(error, 'status_code', 'unknown')}"
