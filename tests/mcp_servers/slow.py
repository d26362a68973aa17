"""An MCP server over stdio (standard library only) whose one tool answers late.

wait (read-only): sleeps the seconds it is given, then says `waited N s`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

TOOLS = [
    {
        "name": "wait",
        "description": "Wait the seconds given, then answer.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
]


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None  # a notification
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "slow", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        seconds = float((message.get("params", {}).get("arguments") or {}).get("seconds", 0))
        time.sleep(seconds)
        result = {"content": [{"type": "text", "text": f"waited {seconds:g} s"}], "isError": False}
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
