"""Attempts to make each open MCP session hold a large message for good: one ~3.9 MB
message a session — a `ping` with params, a `tools/call` with a large `_meta`, a JSON-RPC
response — then the sessions left open, idle (the SDK's read loop used to keep each
session's last message until the next came)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx2

from bastion.shared.bus import Client as Bus
from tests.helpers.bus import Plane
from tests.helpers.door_process import door_process, huge_initialize, rss_bytes
from tests.helpers.front_door import new_token

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
MANY = b",".join([b"{}"] * 1_290_000)  # ~3.9 MB: a million Python objects once parsed
LARGE = {
    "ping": b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":[%s]}}' % MANY,
    "tools/call": b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read_file",'
    b'"arguments":{"path":"a.txt","x":1},"_meta":{"x":[%s]}}}' % MANY,
    "response": b'{"jsonrpc":"2.0","id":"none","result":{"x":[%s]}}' % MANY,
}


class Session:
    """One MCP session opened over plain HTTP."""

    def __init__(self, http: httpx2.AsyncClient, url: str, token: str) -> None:
        self._http = http
        self._url = f"{url}/mcp"
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }

    async def open(self) -> None:
        opened = await self._http.post(
            self._url, content=huge_initialize(objects=1), headers=self._headers
        )
        assert opened.status_code == 200, opened.text[:500]
        self._headers |= {
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        told = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        assert (await self.post(told)).status_code == 202

    async def post(self, body: bytes) -> httpx2.Response:
        return await self._http.post(self._url, content=body, headers=self._headers)

    async def delete(self) -> None:
        assert (await self._http.delete(self._url, headers=self._headers)).status_code == 200


async def test_open_sessions_do_not_keep_the_large_message_each_was_sent_last(
    client: Bus, plane_of: Plane, nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    async with (
        plane_of(),
        door_process(nats_url, tmp_path) as door,
        httpx2.AsyncClient(timeout=120) as http,
    ):
        token = await new_token(client, workspace, autonomy="L2")
        warm = Session(http, door.url, token)  # the allocator's high-water mark of one, first
        await warm.open()
        for body in LARGE.values():
            assert (await warm.post(body)).status_code < 300
        await warm.delete()
        before = rss_bytes(door.pid)
        kept: list[Session] = []
        for body in [*LARGE.values(), LARGE["ping"]]:
            session = Session(http, door.url, token)
            await session.open()
            answer = await session.post(body)
            assert answer.status_code < 300, answer.text[:500]
            kept.append(session)
        after = rss_bytes(door.pid)  # the four sessions still open
    logger.info("front door RSS: %d MiB before, %d MiB after", before // MIB, after // MIB)
    assert after - before < 50 * MIB, (before // MIB, after // MIB)
