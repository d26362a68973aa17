"""A loopback stand-in for the search providers (and a long page): what they were asked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import anyio
from anyio.abc import SocketStream

from tests.helpers.loopback import serving_on_loopback

LONG_PAGE = "".join(f"line {n} of a long page\n" for n in range(400))

_RESULTS = [
    {"title": f"Result <b>{n}</b>", "url": f"https://r{n}.example/", "text": f"about &amp; {n}"}
    for n in range(1, 13)
]


@dataclass(frozen=True)
class Asked:
    """One request the fake provider received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeProvider:
    """The server's port and every request it saw."""

    port: int = 0
    asked: list[Asked] = field(default_factory=list)


def _answer(asked: Asked) -> tuple[str, bytes]:
    if asked.path == "/long":
        return "text/plain; charset=utf-8", LONG_PAGE.encode()
    if asked.path == "/res/v1/web/search":
        items = [{"title": r["title"], "url": r["url"], "description": r["text"]} for r in _RESULTS]
        count = int(asked.query.get("count", ["20"])[0])
        return "application/json", json.dumps({"web": {"results": items[:count]}}).encode()
    items = [{"title": r["title"], "url": r["url"], "content": r["text"]} for r in _RESULTS]
    return "application/json", json.dumps({"results": items}).encode()


async def _serve(stream: SocketStream, server: FakeProvider) -> None:
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            try:
                data += await stream.receive()
            except anyio.EndOfStream:
                return
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])
        }
        while len(body) < int(headers.get("content-length", "0")):
            body += await stream.receive()
        method, target, _ = lines[0].split(" ")
        parts = urlsplit(target)
        asked = Asked(method, parts.path, parse_qs(parts.query), headers, body)
        server.asked.append(asked)
        kind, payload = _answer(asked)
        reply = [
            "HTTP/1.1 200 OK",
            f"Content-Type: {kind}",
            f"Content-Length: {len(payload)}",
            "Connection: close",
        ]
        await stream.send(("\r\n".join(reply) + "\r\n\r\n").encode() + payload)


@asynccontextmanager
async def fake_provider() -> AsyncIterator[FakeProvider]:
    """The fake on 127.0.0.1 until the block exits."""
    server = FakeProvider()

    async def handle(stream: SocketStream) -> None:
        await _serve(stream, server)

    async with serving_on_loopback(handle) as server.port:
        yield server
