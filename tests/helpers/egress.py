"""What the egress tests share: a loopback web server, a proxy client, a network guard, and the
egress service's test resolver, settings and client."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest
from anyio.abc import SocketStream

import bastion.egress.dial
from bastion.egress.resolver import FixedResolver
from bastion.egress.settings import EgressSettings
from bastion.proto import subjects
from bastion.proto.egress import (
    ConnectionLog,
    ConnectionsRequest,
    EgressGrant,
    FetchedPage,
    GrantRequest,
)
from bastion.proto.stubs import FetchRequest
from bastion.shared.bus import Client, request
from tests.helpers.loopback import serving_on_loopback

PAGES: dict[str, tuple[str, dict[str, str], bytes]] = {
    "/": (
        "200 OK",
        {"Content-Type": "text/html; charset=utf-8"},
        b"<html><head><title>t</title><script>evil()</script></head><body>"
        b"<h1>Loopback page</h1><p>Hello <a href='/next'>next</a></p></body></html>",
    ),
    "/plain": ("200 OK", {"Content-Type": "text/plain"}, b"just text\n"),
    "/binary": ("200 OK", {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n"),
    "/to-private": ("302 Found", {"Location": "http://10.0.0.1/"}, b""),
    "/to-metadata": (
        "302 Found",
        {"Location": "http://169.254.169.254/latest/meta-data/"},
        b"",
    ),
    "/to-plain": ("301 Moved Permanently", {"Location": "/plain"}, b""),
    "/loop": ("302 Found", {"Location": "/loop"}, b""),
}


@dataclass
class WebServer:
    """A loopback HTTP/1.1 server: its port and the requests it saw (line and Host)."""

    port: int = 0
    seen: list[tuple[str, str]] = field(default_factory=list)


async def _serve_one(stream: SocketStream, server: WebServer) -> None:
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            try:
                data += await stream.receive()
            except anyio.EndOfStream:
                return
        lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        host = next(
            (ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("host:")), ""
        )
        server.seen.append((lines[0], host))
        path = lines[0].split(" ")[1]
        status, headers, body = PAGES.get(path, ("404 Not Found", {}, b"no such page"))
        head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode() + body)


@asynccontextmanager
async def web_server() -> AsyncIterator[WebServer]:
    """A server on 127.0.0.1, serving `PAGES`, until the block exits."""
    server = WebServer()

    async def handle(stream: SocketStream) -> None:
        await _serve_one(stream, server)

    async with serving_on_loopback(handle) as server.port:
        yield server


def basic(grant_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{grant_id}:{secret}".encode()).decode()


@dataclass(frozen=True)
class ProxyAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    stream: SocketStream | None = None


async def ask_proxy(proxy: str, head: str, keep_open: bool = False) -> ProxyAnswer:
    """Send a request head to the proxy and read its answer's head (and body when closed)."""
    host, port = proxy.rsplit(":", 1)
    stream = await anyio.connect_tcp(host, int(port))
    await stream.send(head.encode())
    data = b""
    with anyio.fail_after(10):
        while b"\r\n\r\n" not in data:
            data += await stream.receive()
        if not keep_open:
            try:
                while True:
                    data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if not keep_open:
        await stream.aclose()
    return ProxyAnswer(int(lines[0].split(" ")[1]), headers, body, stream if keep_open else None)


def guard_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Connections off loopback are refused and listed: the test asserts the list is empty.

    The proxy and fetch_url connect through `anyio.connect_tcp` (httpcore's backend too),
    so the guard there proves a refusal happened before any connection was tried.
    """
    off_loopback: list[str] = []
    real = anyio.connect_tcp

    async def guarded(*args: object, **kwargs: object) -> object:
        host = kwargs.get("remote_host", args[0] if args else "")
        port = kwargs.get("remote_port", args[1] if len(args) > 1 else 0)
        if not ipaddress.ip_address(str(host)).is_loopback:
            off_loopback.append(f"{host}:{port}")
            raise OSError(f"the test network guard refused {host}:{port}")
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bastion.egress.dial.anyio, "connect_tcp", guarded)
    return off_loopback


SESSION = "0123456789abcdef"
"""The session the egress requests of `Egress` are made for."""


RESOLVER = FixedResolver(  # names of refused addresses, and `public.test` on loopback
    {
        "internal.test": ["10.0.0.5"],
        "metadata.test": ["169.254.169.254"],
        "mixed.test": ["192.168.7.7", "fd00::7"],
        "public.test": ["127.0.0.1"],
    }
)


@dataclass
class Egress:
    """A running egress service: grant hosts, fetch pages, read its connection log."""

    client: Client
    off_loopback: list[str]

    async def grant(self, *hosts: str, any_public_host: bool = False) -> EgressGrant:
        grant: EgressGrant = await request(
            self.client,
            subjects.EGRESS_GRANT,
            GrantRequest(
                session_id=SESSION, tenant="acme", hosts=hosts, any_public_host=any_public_host
            ),
            EgressGrant,
            timeout_s=10,
        )
        return grant

    async def connections(self, grant: EgressGrant) -> str:
        log: ConnectionLog = await request(
            self.client,
            subjects.EGRESS_CONNECTIONS,
            ConnectionsRequest(grant_id=grant.grant_id),
            ConnectionLog,
            timeout_s=10,
        )
        return log.summary()

    async def fetch(self, url: str, fmt: str = "markdown") -> FetchedPage:
        page: FetchedPage = await request(
            self.client,
            subjects.EGRESS_FETCH,
            FetchRequest(session_id=SESSION, url=url, format=fmt, tenant="acme"),
            FetchedPage,
            timeout_s=30,
        )
        return page


def egress_settings(nats_url: str, allow: str = "") -> EgressSettings:
    """Egress settings for a test: `allow` is the operator's extra ranges (`127.0.0.0/8`)."""
    return EgressSettings(nats_url=nats_url, egress_allow_ranges=allow, egress_fetch_timeout_s=10)
