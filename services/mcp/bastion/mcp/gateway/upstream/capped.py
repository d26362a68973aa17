"""An httpx2 transport whose responses are bounded: a body, or an SSE event, over the limit
breaks the link and ends the read.

The SDK reads a JSON body whole (`aread`) and the legacy SSE transport buffers an event of
any size; this wrapper counts bytes as they arrive, so neither can grow past the limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from bastion.mcp.gateway.upstream.link import Link

__all__ = ["CappedTransport", "TooLarge"]


class TooLarge(httpx2.StreamError):
    """A response body or event went past the limit (the SDK treats it as a stream error)."""


class _CappedBody(httpx2.AsyncByteStream):
    """A response body cut off at `max_bytes` in all, or per SSE event when `per_event`."""

    def __init__(
        self, inner: httpx2.AsyncByteStream, max_bytes: int, per_event: bool, link: Link
    ) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._per_event = per_event
        self._link = link
        self._count = 0
        self._partial = 0
        """Bytes of the line not yet ended."""

    def _over(self) -> TooLarge:
        self._link.break_with(f"sent a message over {self._max_bytes} bytes")
        return TooLarge("the upstream sent a message over the limit")

    def _count_events(self, chunk: bytes) -> None:
        """Bytes of the current SSE event: a blank line ends one."""
        start = 0
        while (newline := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:newline]
            if self._partial == 0 and piece in (b"", b"\r"):
                self._count = 0
            else:
                self._count += len(piece) + 1
            self._partial = 0
            start = newline + 1
        rest = len(chunk) - start
        self._partial += rest
        self._count += rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            if self._per_event:
                self._count_events(chunk)
            else:
                self._count += len(chunk)
            if self._count > self._max_bytes:
                raise self._over()
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """`inner`, its response bodies bounded to `max_bytes` (per event for an SSE stream)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int, link: Link) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._link = link

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        per_event = response.headers.get("content-type", "").startswith("text/event-stream")
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedBody(response.stream, self._max_bytes, per_event, self._link),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
