"""An MCP server over stdio written with Python's standard library only, for sandboxes whose
Python has nothing else (the Docker test image): the handshake era (2025-11-25), two tools.

whoami (read-only): the user it runs as, its directory, and which variables it was given.
keep (write): keeps a text in `kept.txt` in its directory.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

TOOLS = [
    {
        "name": "whoami",
        "description": "Say who and where the server is.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": "keep",
        "description": "Keep a text in kept.txt.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": False, "openWorldHint": False},
    },
]


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if name == "whoami":
        names = sorted(k for k in os.environ if k not in {"PATH", "HOME", "HOSTNAME"})
        return text(f"uid={os.getuid()} cwd={os.getcwd()} env={','.join(names)}")
    Path("kept.txt").write_text(str(arguments.get("text", "")))
    return text("kept")


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None  # a notification
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "plain", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        params = message.get("params", {})
        result = call(params.get("name", ""), params.get("arguments") or {})
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        return {"jsonrpc": "2.0", "id": ident, "error": error}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> None:
    for line in sys.stdin:
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
