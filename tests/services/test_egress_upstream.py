"""Through an operator's upstream proxy: every connection is a CONNECT to the address the
egress service checked, never the name, so the upstream cannot resolve it again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest
from anyio.abc import SocketStream

from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.shared.bus import Client
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import RESOLVER, Egress, ask_proxy, basic, guard_network, web_server
from tests.helpers.loopback import serving_on_loopback


@dataclass
class Upstream:
    """A loopback CONNECT proxy: its port, what it was asked, and whether it refuses all."""

    port: int = 0
    asked: list[str] = field(default_factory=list)
    refuse: bool = False


async def _relay(source: SocketStream, sink: SocketStream) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    finally:
        await sink.aclose()


@asynccontextmanager
async def upstream_proxy(refuse: bool = False) -> AsyncIterator[Upstream]:
    upstream = Upstream(refuse=refuse)

    async def handle(client: SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += await client.receive()
        line = head.split(b"\r\n", 1)[0].decode()
        upstream.asked.append(line)
        if upstream.refuse:
            await client.send(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await client.aclose()
            return
        host, port = line.split()[1].rsplit(":", 1)
        target = await anyio.connect_tcp(host, int(port))
        await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
        async with anyio.create_task_group() as relays:
            relays.start_soon(_relay, client, target)
            relays.start_soon(_relay, target, client)

    async with serving_on_loopback(handle) as upstream.port:
        yield upstream


@asynccontextmanager
async def egress_through(
    client: Client, run_service: ServiceRunner, nats_url: str, upstream: Upstream
) -> AsyncIterator[Egress]:
    settings = EgressSettings(
        nats_url=nats_url,
        egress_allow_ranges="127.0.0.0/8",
        egress_upstream=f"127.0.0.1:{upstream.port}",
    )
    async with run_service(egress_service(RESOLVER), settings):
        yield Egress(client, [])


async def test_a_tunnel_goes_through_the_upstream_to_the_checked_address_not_the_name(
    client: Client, run_service: ServiceRunner, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    off_loopback = guard_network(monkeypatch)
    async with (
        web_server() as server,
        upstream_proxy() as upstream,
        egress_through(client, run_service, nats_url, upstream) as egress,
    ):
        grant = await egress.grant(f"public.test:{server.port}")
        auth = basic(grant.grant_id, grant.secret)
        answer = await ask_proxy(
            grant.proxy,
            f"CONNECT public.test:{server.port} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            keep_open=True,
        )
        assert answer.status == 200 and answer.stream is not None
        async with answer.stream as tunnel:
            await tunnel.send(b"GET /plain HTTP/1.1\r\nHost: public.test\r\n\r\n")
            data = b""
            with anyio.fail_after(10):
                while b"just text" not in data:
                    data += await tunnel.receive()
    assert upstream.asked == [f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"]
    assert server.seen == [("GET /plain HTTP/1.1", "public.test")]
    assert off_loopback == []


async def test_an_upstream_that_refuses_is_an_answer_and_a_refused_target_never_reaches_it(
    client: Client, run_service: ServiceRunner, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard_network(monkeypatch)
    async with (
        web_server() as server,
        upstream_proxy(refuse=True) as upstream,
        egress_through(client, run_service, nats_url, upstream) as egress,
    ):
        grant = await egress.grant(f"public.test:{server.port}", "internal.test")
        auth = basic(grant.grant_id, grant.secret)
        with anyio.fail_after(30):
            through = await ask_proxy(
                grant.proxy,
                f"CONNECT public.test:{server.port} HTTP/1.1\r\n"
                f"Proxy-Authorization: {auth}\r\n\r\n",
            )
            private = await ask_proxy(
                grant.proxy,
                f"CONNECT internal.test:443 HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            )
    assert through.status >= 500
    assert private.status == 403  # classified before any dial: the upstream never hears of it
    assert upstream.asked == [f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"]
    assert server.seen == []
