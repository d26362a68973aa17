"""An httpcore network backend pinned to a checked address, and one request through it."""

from __future__ import annotations

import ssl
import string
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, urlsplit

import httpcore

from bastion.egress.dial import Dialer, connect_head, upstream_accepted
from bastion.egress.errors import Refused, Unreachable
from bastion.egress.hosts import host_header, normalize_host, split_target
from bastion.shared.errors import InvalidInput
from bastion.shared.netclass import IPAddress

__all__ = [
    "Hop",
    "PinnedBackend",
    "Reply",
    "ascii_url",
    "checked_hop",
    "pinned_request",
    "split_url",
]


def ascii_url(parts: SplitResult, host: str, port: int) -> httpcore.URL:
    """The URL httpcore is asked for: the normalized (`xn--`) host, so that TLS checks and
    sends as SNI the name that was checked, not one Python's IDNA 2003 codec made of it;
    a character outside printable ASCII in the path is percent-encoded."""
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return httpcore.URL(
        scheme=parts.scheme.encode("ascii"),
        host=host.encode("ascii"),
        port=port,
        target=quote(path, safe=string.punctuation).encode("ascii"),
    )


@dataclass(frozen=True)
class Hop:
    """One request: where it went, and whether it was allowed."""

    target: str
    refused: str | None


def split_url(url: str) -> tuple[SplitResult, str, int]:
    """`url`'s parts, its normalized host and its port (the scheme's when none is given).

    Raises:
        InvalidInput: not an http(s) URL, or its port is not a number of one.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"{url[:200]} is not an http:// or https:// URL")
    host = normalize_host(parts.hostname)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidInput(f"{url[:200]} names a port that is not one") from None
    return parts, host, port


async def checked_hop(dialer: Dialer, host: str, port: int, hops: list[Hop]) -> IPAddress:
    """The address `dialer` approves for `host:port`; the hop goes into `hops` either way.

    Raises:
        Refused: the address is refused.
        Unreachable: the host does not resolve.
    """
    target = f"{host}:{port}"
    try:
        address = await dialer.check(host, port)
    except Refused as error:
        hops.append(Hop(error.target, error.reason))
        raise
    except Unreachable:
        hops.append(Hop(target, "does not resolve"))
        raise
    hops.append(Hop(target, None))
    return address


@dataclass(frozen=True)
class Reply:
    """A response read whole (up to a bound)."""

    status: int
    headers: dict[str, str]
    body: bytes


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the checked address whatever host httpcore names (directly or through
    the upstream proxy's CONNECT to that address)."""

    def __init__(self, address: IPAddress, upstream: str) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._address = address
        self._upstream = upstream

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if not self._upstream:
            return await self._inner.connect_tcp(
                str(self._address), port, timeout, local_address, socket_options
            )
        up_host, up_port = split_target(self._upstream)
        stream = await self._inner.connect_tcp(up_host, up_port, timeout)
        await stream.write(connect_head(self._address, port), timeout)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 16384:
            chunk = await stream.read(1, timeout)  # byte by byte: nothing past the head
            if not chunk:
                break
            head += chunk
        if not upstream_accepted(head):
            await stream.aclose()
            raise httpcore.ConnectError("the upstream proxy refused the connection")
        return stream

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def pinned_request(
    dialer: Dialer,
    context: ssl.SSLContext,
    url: str,
    *,
    method: str = "GET",
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    max_bytes: int,
    hops: list[Hop],
) -> Reply:
    """`method url` to the address `dialer` checked; no redirects; at most `max_bytes` read.

    Raises:
        InvalidInput: not an http(s) URL (or its port is not one), or the answer is longer
            than `max_bytes`.
        Refused: the address is refused (before any connection to it).
        Unreachable: the host does not resolve or answer.
        TimeoutError: httpcore timed out.
    """
    parts, host, port = split_url(url)
    target = f"{host}:{port}"
    address = await checked_hop(dialer, host, port, hops)
    request_headers = [(b"Host", host_header(host, parts.port)), *headers]
    request_headers.append((b"Connection", b"close"))
    try:
        async with (
            httpcore.AsyncConnectionPool(
                ssl_context=context,
                network_backend=PinnedBackend(address, dialer.upstream),
                max_connections=1,
            ) as pool,
            pool.stream(
                method, ascii_url(parts, host, port), headers=request_headers, content=body or None
            ) as response,
        ):
            data = bytearray()
            async for chunk in response.aiter_stream():
                data.extend(chunk)
                if len(data) > max_bytes:
                    raise InvalidInput(f"{target} answered more than {max_bytes} bytes")
            return Reply(
                response.status,
                {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers},
                bytes(data),
            )
    except httpcore.TimeoutException:
        raise TimeoutError from None
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol):
        raise Unreachable(f"{target} did not answer") from None
