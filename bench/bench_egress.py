"""What the egress proxy costs, against going direct, measured side by side in one run.

It starts a NATS server, the egress service in this process (with the loopback range
allowed as an operator range, and a resolver that names the bench's server), and a
loopback HTTP server, then times:
- downloading 64 MiB from the server through a CONNECT tunnel vs directly (MiB/s);
- connecting: CONNECT through the proxy up to `200 Connection established` (grant check,
  resolve, classify, connect, record) vs a plain TCP connect to the server.

It prints throughput per run and the median and p99 connect latency with their ratio.
Usage: python -m bench.bench_egress [--mib 64] [--connects 200]   (from the repository root)
"""

from __future__ import annotations

import argparse
import base64
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
from anyio.abc import SocketAttribute, SocketStream

from bastion.cli.natsserver import running_nats_server
from bastion.egress.resolver import FixedResolver
from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.proto import subjects
from bastion.proto.egress import EgressGrant, GrantRequest
from bastion.shared.bus import connect, request
from bench.common import percentile

CHUNK = b"\0" * (1024 * 1024)


async def serve_download(size: int) -> Callable[[SocketStream], Awaitable[None]]:
    async def handle(stream: SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                try:
                    data += await stream.receive()
                except anyio.EndOfStream:
                    return
            await stream.send(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode())
            for _ in range(size // len(CHUNK)):
                await stream.send(CHUNK)

    return handle


async def download(stream: SocketStream, size: int) -> None:
    await stream.send(b"GET /big HTTP/1.1\r\nHost: bench.test\r\n\r\n")
    received = 0
    head_seen = False
    data = b""
    while received < size:
        chunk = await stream.receive(1024 * 1024)
        if not head_seen:
            data += chunk
            if b"\r\n\r\n" in data:
                head_seen = True
                received = len(data.split(b"\r\n\r\n", 1)[1])
            continue
        received += len(chunk)


async def tunnel(proxy: str, auth: str, target: str) -> SocketStream:
    host, port = proxy.rsplit(":", 1)
    stream = await anyio.connect_tcp(host, int(port))
    await stream.send(f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    if not data.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"the proxy refused the bench: {data[:200]!r}")
    return stream


async def measure(nats_url: str, mib: int, connects: int, runs: int) -> None:
    size = mib * 1024 * 1024
    settings = EgressSettings(
        nats_url=nats_url,
        egress_allow_ranges="127.0.0.0/8",
        egress_max_bytes=4 * size,
    )
    resolver = FixedResolver({"bench.test": ["127.0.0.1"]})
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(connect(settings, "bench"))
        service = await stack.enter_async_context(egress_service(resolver)(client, settings))
        await stack.enter_async_context(service.running(client, 5.0))
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = int(listener.extra(SocketAttribute.local_port))
        group = await stack.enter_async_context(anyio.create_task_group())
        group.start_soon(listener.serve, await serve_download(size))
        grant: EgressGrant = await request(
            client,
            subjects.EGRESS_GRANT,
            GrantRequest(session_id="0" * 16, tenant="bench", hosts=(f"bench.test:{port}",)),
            EgressGrant,
            timeout_s=10,
        )
        secret = f"{grant.grant_id}:{grant.secret}".encode()
        auth = "Basic " + base64.b64encode(secret).decode()
        target = f"bench.test:{port}"

        print(f"download of {mib} MiB, {runs} runs each (MiB/s)")
        through, direct = [], []
        for _ in range(runs):
            started = time.perf_counter()
            async with await tunnel(grant.proxy, auth, target) as stream:
                await download(stream, size)
            through.append(mib / (time.perf_counter() - started))
            started = time.perf_counter()
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await download(stream, size)
            direct.append(mib / (time.perf_counter() - started))
        t, d = statistics.median(through), statistics.median(direct)
        print(f"  through the proxy {t:9.1f}   direct {d:9.1f}   ratio {d / t:5.2f}x slower")

        async def via_proxy() -> None:
            stream = await tunnel(grant.proxy, auth, target)
            await stream.aclose()

        async def plain() -> None:
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.aclose()

        proxied, base = await timed(connects, via_proxy), await timed(connects, plain)
        pm, bm = statistics.median(proxied), statistics.median(base)
        print(f"connect latency, {connects} connects each after 5 warm-up (ms)")
        print(f"  {'':<18} {'median':>9} {'p99':>9}")
        print(f"  {'through the proxy':<18} {pm:9.3f} {percentile(proxied, 0.99):9.3f}")
        print(f"  {'direct':<18} {bm:9.3f} {percentile(base, 0.99):9.3f}")
        print(f"  added {pm - bm:.3f} ms a connection (ratio {pm / bm:.1f}x)")
        group.cancel_scope.cancel()


async def timed(calls: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    for _ in range(min(5, calls)):
        await one()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await one()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the download, in MiB")
    parser.add_argument("--runs", type=int, default=3, help="downloads each way")
    parser.add_argument("--connects", type=int, default=200, help="timed connects each way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_nats_server(Path(tmp) / "nats") as url:
        anyio.run(measure, url, args.mib, args.connects, args.runs)


if __name__ == "__main__":
    main()
