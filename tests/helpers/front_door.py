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

__all__ = ["Asked", "DoorOf", "mcp_client", "new_token", "read_json", "text_of"]

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
