"""What the upstream connection tests share: the servers' paths and their specs."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from bastion.proto.mcp import McpServerSpec

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "mcp-notes" / "notes_server.py"
SERVERS = ROOT / "tests" / "mcp_servers"
PYTHON = sys.executable
PYTHON_DIRS = tuple(sorted({str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve())}))
"""What a sandboxed server's Python needs to see: the virtual environment and its base."""


def stdio_spec(
    script: Path, directory: Path, *args: str, sandbox: str = "none", env: tuple[str, ...] = ()
) -> McpServerSpec:
    """A spec running `script` with this Python, in `directory`."""
    return McpServerSpec(
        transport="stdio",
        command=(PYTHON, str(script), *args),
        directory=str(directory),
        sandbox=sandbox,
        env=env,
        read_only_dirs=(*PYTHON_DIRS, str(script.parent)) if sandbox == "bwrap" else (),
    )


def free_port() -> int:
    """A port free on 127.0.0.1 now (the server about to bind it is started right after)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def serving_http(
    script: Path, directory: Path, flag: str, port: int | None = None
) -> AsyncIterator[int]:
    """`script` serving HTTP (`--http` or `--sse`) on a loopback port (a free one unless
    given), until the block exits; yields the port once it accepts connections."""
    port = port or free_port()
    process = await anyio.open_process(
        [PYTHON, str(script), flag, str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=directory,
    )
    async with process:
        try:
            with anyio.fail_after(20):
                while True:
                    try:
                        stream = await anyio.connect_tcp("127.0.0.1", port)
                    except OSError:
                        await anyio.sleep(0.05)  # polling for readiness, bounded above
                        continue
                    await stream.aclose()
                    break
            yield port
        finally:
            process.terminate()
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
