"""An MCP server over stdio (standard library only) that records what a client cancels.

wait (read-only): waits the seconds it is given, then says `waited N s`; a
`notifications/cancelled` naming its request ends the wait unanswered. change (neither
read-only nor idempotent, so journaled): the same wait, as a tool that changes something.
Each event is a line of the file named by the first argument: `started <id>` when a call
begins, `cancelled <id>` when its cancel comes.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

TOOLS = [
    {
        "name": "wait",
        "description": "Wait the seconds given, then answer.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": "change",
        "description": "Wait the seconds given as a change would, then answer.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
        "annotations": {"readOnlyHint": False, "openWorldHint": False},
    },
]
RECORD = Path(sys.argv[1])
_LOCK = threading.Lock()
_WAITS: dict[str, threading.Event] = {}


def note(line: str) -> None:
    with _LOCK, RECORD.open("a") as record:
        record.write(line + "\n")


def send(message: dict[str, Any]) -> None:
    with _LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def wait(ident: Any, seconds: float) -> None:
    stop = _WAITS[json.dumps(ident)]
    if not stop.wait(seconds):
        text = f"waited {seconds:g} s"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        send({"jsonrpc": "2.0", "id": ident, "result": result})


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, ident = message.get("method"), message.get("id")
    if method == "notifications/cancelled":
        cancelled = message.get("params", {}).get("requestId")
        note(f"cancelled {json.dumps(cancelled)}")
        found = _WAITS.get(json.dumps(cancelled))
        if found is not None:
            found.set()
        return None
    if ident is None:
        return None  # another notification
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "cancellable", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        seconds = float((message.get("params", {}).get("arguments") or {}).get("seconds", 0))
        _WAITS[json.dumps(ident)] = threading.Event()
        note(f"started {json.dumps(ident)}")
        threading.Thread(target=wait, args=(ident, seconds), daemon=True).start()
        return None
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
            send(reply)


if __name__ == "__main__":
    main()
