"""The HTTP transports: Streamable HTTP, or the legacy HTTP+SSE one, bounded and routed.

Which one a server speaks is found as the specification says: the Streamable HTTP POST
first; when the server answers it with an HTTP error, the legacy transport's GET stream.
Every response is bounded (`capped`); every request leaves through the egress proxy
(`egress`), or, with no route, only to a loopback URL. `headers` are the spec's, with each
`${VAR}` filled from the caller's values.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, Literal

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from bastion.mcp.gateway.upstream.capped import CappedTransport
from bastion.mcp.gateway.upstream.egress import EgressRoute, is_loopback_url
from bastion.mcp.gateway.upstream.errors import UpstreamUnreachable
from bastion.mcp.gateway.upstream.isolate import isolated
from bastion.mcp.gateway.upstream.limits import UpstreamLimits
from bastion.mcp.gateway.upstream.link import Link
from bastion.proto.mcp import McpServerSpec

__all__ = ["HTTP_TRANSPORTS", "HttpTransport", "filled_headers", "http_transport"]

LEGACY_SSE_EVENT_BYTES: Final = 1024 * 1024
"""The largest event the SDK's legacy SSE client reads (httpx2's `EventSource` default):
a larger message breaks the link here first, with the reason."""
SSE_READ_TIMEOUT_S: Final = 300.0
"""How long a stream may stay silent before it counts as lost."""

HttpTransport = Literal["streamable", "sse"]
HTTP_TRANSPORTS: Final[tuple[HttpTransport, ...]] = ("streamable", "sse")
"""The transports tried, in order."""

_VARIABLE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def filled_headers(spec: McpServerSpec, values: Mapping[str, str]) -> dict[str, str]:
    """The spec's headers, each `${VAR}` replaced by its value.

    Raises:
        UpstreamUnreachable: a variable has no value, or a value would break the header.
    """
    headers: dict[str, str] = {}
    for template in spec.headers:
        name, _, value = template.partition(": ")
        for variable in _VARIABLE.findall(value):
            if variable not in values:
                raise UpstreamUnreachable(
                    f"the header {name} of the MCP server names ${{{variable}}}, which has no "
                    f"value: add the secret {variable} for the tenant"
                )
        filled = _VARIABLE.sub(lambda match: values[match.group(1)], value)
        if any(char in filled for char in "\r\n\0"):
            raise UpstreamUnreachable(
                f"the value of the header {name} of the MCP server holds a line break: fix "
                "the variables it names"
            )
        headers[name] = filled
    return headers


def _http_client(
    *,
    egress: EgressRoute | None,
    limits: UpstreamLimits,
    max_bytes: int,
    link: Link,
    headers: Mapping[str, str] | None,
    timeout: httpx2.Timeout | None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    # Through the proxy, a plain request's connection is carried byte for byte after its
    # first request: one request per connection keeps every request checked.
    pooled = httpx2.Limits(max_keepalive_connections=0 if egress is not None else 20)
    inner = (
        egress.transport(pooled)
        if egress is not None
        else httpx2.AsyncHTTPTransport(trust_env=False, limits=pooled)
    )
    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout or httpx2.Timeout(limits.connect_timeout_s, read=SSE_READ_TIMEOUT_S),
        auth=auth,
        transport=CappedTransport(inner, max_bytes, link),
        trust_env=False,
    )


@asynccontextmanager
async def _streamable(
    spec: McpServerSpec, client: httpx2.AsyncClient, limits: UpstreamLimits
) -> AsyncIterator[TransportStreams]:
    async with (
        client,
        streamable_http_client(
            spec.url or "", http_client=client, max_sse_event_size=limits.max_message_bytes
        ) as streams,
    ):
        yield streams


def http_transport(
    spec: McpServerSpec,
    *,
    values: Mapping[str, str],
    egress: EgressRoute | None,
    limits: UpstreamLimits,
    link: Link,
    which: HttpTransport = "streamable",
) -> AbstractAsyncContextManager[TransportStreams]:
    """The session streams of one HTTP transport (`streamable` or `sse`) to `spec.url`.

    Raises:
        UpstreamUnreachable: a header cannot be filled, or no route reaches the URL.
    """
    url = spec.url or ""
    if egress is None and not is_loopback_url(url):
        raise UpstreamUnreachable(
            f"the MCP server at {url[:200]} is not on this machine, and its traffic leaves only "
            "through the egress service: give the connection an egress route"
        )
    headers = filled_headers(spec, values)
    if which == "streamable":
        client = _http_client(
            egress=egress,
            limits=limits,
            max_bytes=limits.max_message_bytes,
            link=link,
            headers=headers,
            timeout=None,
        )
        return isolated(_streamable(spec, client, limits), link)

    def factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return _http_client(
            egress=egress,
            limits=limits,
            max_bytes=min(limits.max_message_bytes, LEGACY_SSE_EVENT_BYTES),
            link=link,
            headers=headers,
            timeout=timeout,
            auth=auth,
        )

    return isolated(
        sse_client(
            spec.url or "",
            headers=headers,
            timeout=limits.connect_timeout_s,
            sse_read_timeout=SSE_READ_TIMEOUT_S,
            httpx_client_factory=factory,
        ),
        link,
    )
