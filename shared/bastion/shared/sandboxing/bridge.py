"""The egress bridge: inside a sandbox with no network, `127.0.0.1:3128` carried to the proxy.

A command of the `declared` network gets a network namespace of its own with loopback
only. Before it starts, a small Python program (the machine's `python3`) listens on
`127.0.0.1:3128` there, and carries each connection, byte for byte, over the egress
proxy's Unix socket bound read-only into the sandbox. The proxy variables name the bridge
with the call's grant in them; a program that ignores them has no route anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["BRIDGE_PORT", "BRIDGE_PROGRAM", "BRIDGE_SCRIPT", "EGRESS_SOCKET", "EgressBridge"]

BRIDGE_PORT: Final = 3128
EGRESS_SOCKET: Final = "/run/bastion/egress.sock"
"""Where the proxy's socket appears inside the sandbox."""
BRIDGE_SCRIPT: Final = "/run/bastion/bridge.py"
"""Where the bridge's program is written inside the sandbox."""

BRIDGE_PROGRAM: Final = f"""\
import os, socket, threading
threading.stack_size(256 * 1024)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", {BRIDGE_PORT}))
listener.listen(128)
if os.fork():
    os._exit(0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)

def pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def carry(client):
    proxy = socket.socket(socket.AF_UNIX)
    try:
        proxy.connect({EGRESS_SOCKET!r})
    except OSError:
        client.close()
        return
    back = threading.Thread(target=pump, args=(proxy, client), daemon=True)
    back.start()
    pump(client, proxy)
    back.join()
    client.close()
    proxy.close()

while True:
    client, _ = listener.accept()
    threading.Thread(target=carry, args=(client,), daemon=True).start()
""".encode()
"""Listens, forks (the parent's exit says it listens), and carries each connection."""

_WRAPPER: Final = (
    f"if ! python3 -I -S {BRIDGE_SCRIPT}; then\n"
    "  echo 'bastion: the egress bridge did not start (is python3 installed on the "
    "machine?): the command was not run' >&2\n"
    "  exit 125\n"
    "fi\n"
    'exec /bin/sh -c "$1"'
)


@dataclass(frozen=True)
class EgressBridge:
    """One call's bridge: the proxy's socket on the host and the call's grant."""

    socket: Path
    grant_id: str
    secret: str = field(repr=False)

    def environment(self) -> list[tuple[str, str]]:
        """The proxy variables, naming the bridge with the grant in them; `NO_PROXY` empty."""
        url = f"http://{self.grant_id}:{self.secret}@127.0.0.1:{BRIDGE_PORT}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        return [*((name, url) for name in names), ("NO_PROXY", ""), ("no_proxy", "")]

    @staticmethod
    def argv(command: str) -> list[str]:
        """`/bin/sh` starting the bridge, then exec-ing the command with `/bin/sh -c`."""
        return ["/bin/sh", "-c", _WRAPPER, "sh", command]
