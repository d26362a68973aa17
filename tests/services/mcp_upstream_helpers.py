"""What the upstream connection tests share: the servers' paths and their specs."""

from __future__ import annotations

import sys
from pathlib import Path

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
