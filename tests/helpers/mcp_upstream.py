"""What the upstream connection tests share: the servers' paths and their specs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from bastion.proto.mcp import McpServerSpec

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "mcp-notes" / "notes_server.py"
SERVERS = ROOT / "tests" / "mcp_servers"
PYTHON = sys.executable
_AS_ROOT = os.geteuid() == 0
_WITH_THIS_VENV = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
PYTHON_DIRS = (
    (str(Path(sys.prefix).resolve()),)
    if _AS_ROOT
    else tuple(sorted({str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve())}))
)
"""What a sandboxed server's Python needs to see: the virtual environment (and its base,
but for the system's Python `sandboxed_python` runs as root)."""


def sandboxed_python(script: Path, *args: str) -> tuple[str, ...]:
    """The command running `script` with this venv's packages in a bwrap sandbox.

    As root, the sandbox runs as its directory's unprivileged owner, who cannot reach this
    Python (it may lie under root's home): the system's Python runs it instead, with this
    venv's site-packages (the same minor version, so the same compiled packages).
    """
    if not _AS_ROOT:
        return (PYTHON, str(script), *args)
    packages = sysconfig.get_paths()["purelib"]
    return ("/usr/bin/python3", "-I", "-c", _WITH_THIS_VENV, packages, str(script), *args)


def apart(tmp_path: Path) -> Path:
    """A directory for a server beside, not around, the test's state dir (`tmp_path/state`):
    a server's directory may not hold the state dir."""
    directory = tmp_path / "server"
    directory.mkdir(exist_ok=True)
    return directory


def stdio_spec(
    script: Path, directory: Path, *args: str, sandbox: str = "none", env: tuple[str, ...] = ()
) -> McpServerSpec:
    """A spec running `script` with this Python, in `directory`."""
    return McpServerSpec(
        transport="stdio",
        command=sandboxed_python(script, *args)
        if sandbox == "bwrap"
        else (PYTHON, str(script), *args),
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
