"""Resolve, classify every address, connect to the one checked: the only way out.

There is no second lookup between the check and the connection (a name that answers a
public address first and a private one next cannot slip through), and with an upstream
proxy the CONNECT names the checked address, not the host, so it cannot resolve again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketStream

from bastion.egress.errors import Refused, Unreachable
from bastion.egress.hosts import split_target
from bastion.egress.resolver import Resolver
from bastion.shared.netclass import IPAddress, IPNetwork, classify

__all__ = ["Dialer", "connect_head", "read_head", "upstream_accepted"]

MAX_HEAD = 16 * 1024
_BLANK_LINE = re.compile(rb"\r?\n\r?\n")


def connect_head(address: IPAddress, port: int) -> bytes:
    """The CONNECT request that asks an upstream proxy for exactly `address:port`."""
    target = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()


def upstream_accepted(head: bytes) -> bool:
    """Did the upstream proxy answer a CONNECT with 2xx?"""
    parts = head.split(b"\r\n", 1)[0].split()
    return len(parts) >= 2 and parts[1].startswith(b"2")


async def read_head(stream: SocketStream, buffer: bytearray) -> bytes:
    """Bytes up to and including the blank line ending an HTTP head; the rest stays in `buffer`.

    The head ends at its first blank line in either style, CRLF or bare LF, so that a head
    in bare LF is refused at once rather than waited on.

    Raises:
        Refused: the head is longer than 16 KiB, its blank line is not CRLF CRLF, or the
            peer closed first.
    """
    while True:
        blank = _BLANK_LINE.search(buffer)
        if blank is not None:
            if blank.group() != b"\r\n\r\n":
                raise Refused(
                    "request",
                    "its head ends in bare LF line endings: end every line of the head with "
                    "CRLF (\\r\\n), as HTTP/1.1 requires",
                )
            head = bytes(buffer[: blank.end()])
            del buffer[: blank.end()]
            return head
        if len(buffer) > MAX_HEAD:
            raise Refused("request", "its head is longer than 16 KiB")
        try:
            chunk = await stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            raise Refused("request", "the connection closed before its head ended") from None
        buffer.extend(chunk)


@dataclass
class Dialer:
    """How the proxy and `fetch_url` reach a host: the resolver, the operator's ranges,
    the upstream proxy, and the proxy's own address (never a destination)."""

    resolver: Resolver
    allowed: Sequence[IPNetwork] = ()
    upstream: str = ""
    connect_timeout_s: float = 10.0
    own: set[tuple[str, int]] = field(default_factory=set)

    async def check(self, host: str, port: int) -> IPAddress:
        """The first address of `host` that may be reached.

        Raises:
            Refused: every address it resolves to is refused (the reason is the first's).
            Unreachable: it does not resolve.
        """
        target = f"{host}:{port}"
        addresses = await self.resolver.resolve(host, port)
        if not addresses:
            raise Unreachable(f"{host} resolves to no address")
        first_reason = ""
        for address in addresses:
            reason = classify(address, self.allowed)
            if reason is None and (str(address), port) in self.own:
                reason = "the egress proxy itself"
            if reason is None:
                return address
            first_reason = first_reason or reason
        raise Refused(target, first_reason)

    async def connect(self, address: IPAddress, port: int) -> SocketStream:
        """A connection to the checked `address:port`, through the upstream if there is one.

        Raises:
            Unreachable: it refused, did not answer in time, or the upstream said no.
        """
        try:
            with anyio.fail_after(self.connect_timeout_s):
                if not self.upstream:
                    return await anyio.connect_tcp(str(address), port)
                up_host, up_port = split_target(self.upstream)
                stream = await anyio.connect_tcp(up_host, up_port)
                await stream.send(connect_head(address, port))
                buffer = bytearray()
                head = await read_head(stream, buffer)
                if not upstream_accepted(head) or buffer:
                    await stream.aclose()
                    raise Unreachable(f"the upstream proxy refused {address}:{port}")
                return stream
        except (OSError, TimeoutError, Refused):
            raise Unreachable(
                f"{address}:{port} did not accept a connection within {self.connect_timeout_s:g} s"
            ) from None
