"""The MCP front door from an agent's side: a token, the SDK's client, and what it answers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import msgspec
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitResult, TextContent, TextResourceContents

from bastion.proto import subjects
from bastion.proto.frontdoor import CreateToken, TokenCreated
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request

__all__ = [
    "VERSION",
    "Asked",
    "DoorOf",
    "Raw",
    "answer_in",
    "mcp_client",
    "new_token",
    "raw_session",
    "read_json",
    "text_of",
]

DoorOf = Callable[..., AbstractAsyncContextManager[str]]
"""What the `door_of` fixture is: `async with door_of(**mcp_settings) as url`."""


async def new_token(bus: Bus, workspace: Path, **profile: Any) -> str:
    """A front-door token for agent `claude` on `workspace` with `profile` (autonomy, …)."""
    ask = msgspec.convert({"agent": "claude", "workspace": str(workspace), **profile}, CreateToken)
    created: TokenCreated = await request(
        bus, subjects.FRONTDOOR_TOKEN_CREATE, ask, TokenCreated, timeout_s=10
    )
    return created.token


@dataclass
class Asked:
    """An elicitation callback that answers with `content`, and what it was asked."""

    content: dict[str, Any] | None
    messages: list[str] = field(default_factory=list)

    async def __call__(self, _context: object, params: ElicitRequestParams) -> ElicitResult:
        self.messages.append(params.message)
        if self.content is None:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content=self.content)


@asynccontextmanager
async def mcp_client(
    url: str,
    token: str,
    mode: str = "legacy",
    elicit: Asked | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
    delete_on_exit: bool = True,
    sample: Any = None,
    log: Any = None,
) -> AsyncIterator[Client]:
    """The MCP SDK's client on the front door at `url` with `token`, in protocol `mode`;
    `log` is its `logging_callback` (the `notifications/message` it is sent)."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30, read=120),
        transport=transport,
    )
    async with (
        http,
        Client(
            streamable_http_client(
                f"{url}/mcp", http_client=http, terminate_on_close=delete_on_exit
            ),
            mode=mode,  # type: ignore[arg-type]
            elicitation_callback=elicit,
            sampling_callback=sample,
            logging_callback=log,
            cache=None,
        ) as client,
    ):
        yield client


def text_of(result: Any) -> str:
    """The one text content of an MCP tool result."""
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def read_json(client: Client, uri: str) -> Any:
    """An MCP resource's text, read as JSON."""
    read = await client.read_resource(uri)
    [contents] = read.contents
    assert isinstance(contents, TextResourceContents)
    return msgspec.json.decode(contents.text)


VERSION = "2025-11-25"
"""The protocol a `raw_session` speaks."""


@dataclass
class Raw:
    """One session-based MCP session spoken in plain HTTP."""

    http: httpx2.AsyncClient

    @staticmethod
    def call(request_id: int, command: str) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "shell", "arguments": {"command": command}},
        }

    async def answer(self, request_id: int, command: str) -> dict[str, Any]:
        """The `tools/call`'s result, as its POST's stream gives it."""
        response = await self.http.post("/mcp", json=self.call(request_id, command))
        assert response.status_code == 200, response.text
        return answer_in(response.text, request_id)


def answer_in(sse: str, request_id: int) -> dict[str, Any]:
    """The result for `request_id` in an SSE body."""
    for line in sse.splitlines():
        if line.startswith("data: "):
            message = msgspec.json.decode(line.removeprefix("data: "))
            if message.get("id") == request_id:
                assert "result" in message, message
                result: dict[str, Any] = message["result"]
                return result
    raise AssertionError(f"no answer to request {request_id} in {sse!r}")


@asynccontextmanager
async def raw_session(url: str, token: str) -> AsyncIterator[Raw]:
    """An initialized MCP session (protocol 2025-11-25) over plain HTTP, deleted at the end."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    timeout = httpx2.Timeout(30, read=120)
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=timeout) as http:
        opened = await http.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            },
        )
        assert opened.status_code == 200, opened.text
        http.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        http.headers["mcp-protocol-version"] = VERSION
        told = await http.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert told.status_code == 202, told.text
        yield Raw(http)
        await http.delete("/mcp")
