"""The mcp service run as a program of its own (`python -m bastion.mcp`), so a test can read
its process's resident memory; and the `initialize` a client would send with ~3.9 MB of
params, made once."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import anyio
import httpx2

from bastion.cli.natsserver import free_port

__all__ = ["DoorProcess", "door_process", "huge_initialize", "rss_bytes"]

OPERATOR = "op-token-0123456789abcdef"


@dataclass(frozen=True)
class DoorProcess:
    """A running mcp service: its front door's base URL and its process id."""

    url: str
    pid: int


def rss_bytes(pid: int) -> int:
    """The resident memory of process `pid` (VmRSS of /proc/<pid>/status), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"process {pid} has no VmRSS")


@cache
def huge_initialize(request_id: int = 1, objects: int = 1_300_000) -> bytes:
    """An `initialize` whose `capabilities.experimental.x.y` is a list of `objects` empty
    objects (~3.9 MB: under the 4 MiB the front door reads)."""
    many = b",".join([b"{}"] * objects)
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":'
        b'"2025-11-25","capabilities":{"elicitation":{},"experimental":{"x":{"y":[%s]}}},'
        b'"clientInfo":{"name":"hoarder","version":"1"}}}' % (request_id, many)
    )


@asynccontextmanager
async def door_process(nats_url: str, tmp_path: Path, **env: str) -> AsyncIterator[DoorProcess]:
    """`python -m bastion.mcp` on `nats_url`, its front door on a free loopback port, with
    `env` (`BASTION_…` settings) beside; yields once it answers `/readyz`, stops it after."""
    state = tmp_path / f"door-state-{free_port()}"
    state.mkdir()
    tokens = state / "http-tokens"
    tokens.write_text(f"operator:{OPERATOR}\n")
    tokens.chmod(0o600)
    port = free_port()
    given = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    given |= {
        "BASTION_NATS_URL": nats_url,
        "BASTION_STATE_DIR": str(state),
        "BASTION_HTTP_LISTEN": f"127.0.0.1:{port}",
        "BASTION_HTTP_TOKENS_FILE": str(tokens),
        **env,
    }
    url = f"http://127.0.0.1:{port}"
    log = (state / "door.log").open("wb")
    program = [sys.executable, "-m", "bastion.mcp"]
    async with await anyio.open_process(program, env=given, stdout=log, stderr=log) as door:
        try:
            async with httpx2.AsyncClient(timeout=5) as http:
                with anyio.fail_after(60):
                    while True:
                        try:
                            if (await http.get(f"{url}/readyz")).status_code == 200:
                                break
                        except httpx2.TransportError:
                            pass
                        assert door.returncode is None, "the mcp service exited"
                        await anyio.sleep(0.1)
            yield DoorProcess(url, door.pid)
        finally:
            door.terminate()
            with anyio.move_on_after(20):
                await door.wait()
            if door.returncode is None:
                door.kill()
            log.close()
