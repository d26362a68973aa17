"""`fetch_url`: one public page, each hop resolved, classified and connected to as checked.

The HTTP client is httpcore with a network backend that ignores the host it is asked for
and connects to the address `Dialer.check` approved (TLS still verifies the URL's name,
which httpcore sends as SNI). Redirects are followed here, at most five, each hop checked
again; only text is read, at most `max_bytes` of it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from urllib.parse import urljoin

import anyio
import httpcore

from bastion.egress.dial import Dialer
from bastion.egress.errors import Unreachable
from bastion.egress.hosts import host_header
from bastion.egress.htmltext import html_to_text
from bastion.egress.pinned import Hop, PinnedBackend, ascii_url, checked_hop, split_url
from bastion.proto.egress import FetchedPage
from bastion.shared.errors import InvalidInput
from bastion.shared.metrics import egress_io

__all__ = ["Fetcher", "Hop"]

_RECEIVED = {"network.io.direction": "receive"}

MAX_REDIRECTS = 5
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
_FORMATS = ("markdown", "text", "html")


@dataclass(eq=False)
class Fetcher:
    """Fetches pages the way the proxy connects: resolve, classify, connect as checked."""

    dialer: Dialer
    max_bytes: int
    max_chars: int
    timeout_s: float
    keep_chars: int
    _ssl: ssl.SSLContext = field(default_factory=ssl.create_default_context, init=False)

    async def fetch(self, url: str, fmt: str, hops: list[Hop]) -> FetchedPage:
        """The page at `url` as `fmt`; every hop tried is appended to `hops`.

        Raises:
            InvalidInput: not an http(s) URL, an unknown format, or a page that is not text.
            Refused: a hop's address is refused (before any connection to it).
            Unreachable: a hop does not resolve, answer, or finish in time.
        """
        if fmt not in _FORMATS:
            raise InvalidInput(f"format {fmt!r} is not one of markdown, text, html")
        redirects: list[str] = []
        try:
            with anyio.fail_after(self.timeout_s):
                for _ in range(MAX_REDIRECTS + 1):
                    status, headers, body, truncated = await self._one(url, hops)
                    location = headers.get("location")
                    if status in (301, 302, 303, 307, 308) and location:
                        url = urljoin(url, location)
                        redirects.append(url)
                        continue
                    return await self._page(url, status, headers, body, fmt, redirects, truncated)
        except TimeoutError:
            raise Unreachable(
                f"{url} did not finish within {self.timeout_s:g} s: try a smaller page"
            ) from None
        raise InvalidInput(f"{url} redirects more than {MAX_REDIRECTS} times: not followed")

    async def _one(self, url: str, hops: list[Hop]) -> tuple[int, dict[str, str], bytes, bool]:
        parts, host, port = split_url(url)
        target = f"{host}:{port}"
        address = await checked_hop(self.dialer, host, port, hops)
        backend = PinnedBackend(address, self.dialer.upstream)
        request_headers = [
            (b"Host", host_header(host, parts.port)),
            (b"User-Agent", b"bastion-fetch/1"),
            (b"Accept", b"text/html, text/plain, text/markdown, application/json;q=0.9, */*;q=0.1"),
            (b"Accept-Encoding", b"identity"),
            (b"Connection", b"close"),
        ]
        try:
            async with (
                httpcore.AsyncConnectionPool(
                    ssl_context=self._ssl, network_backend=backend, max_connections=1
                ) as pool,
                pool.stream(
                    "GET", ascii_url(parts, host, port), headers=request_headers
                ) as response,
            ):
                headers = {
                    k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers
                }
                if response.status in (301, 302, 303, 307, 308):
                    return response.status, headers, b"", False
                _require_text(url, headers.get("content-type", ""))
                body = bytearray()
                async for chunk in response.aiter_stream():
                    body.extend(chunk)
                    egress_io.add(len(chunk), _RECEIVED)
                    if len(body) >= self.max_bytes:
                        return response.status, headers, bytes(body[: self.max_bytes]), True
                return response.status, headers, bytes(body), False
        except httpcore.TimeoutException:
            raise TimeoutError from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol):
            raise Unreachable(f"{target} did not answer with a page") from None

    async def _page(  # noqa: PLR0917 - one private call site
        self,
        url: str,
        status: int,
        headers: dict[str, str],
        body: bytes,
        fmt: str,
        redirects: list[str],
        truncated: bool,
    ) -> FetchedPage:
        content_type = headers.get("content-type", "")
        charset = "utf-8"
        for param in content_type.split(";")[1:]:
            key, _, value = param.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            text = body.decode(charset, errors="replace")
        except LookupError:
            text = body.decode("utf-8", errors="replace")
        if fmt != "html" and "html" in content_type.lower():
            text = await html_to_text(text, markdown=fmt == "markdown")
        cut = max(0, len(text) - self.max_chars)
        full_text = text[: self.keep_chars] if cut else ""
        if cut:
            text = text[: self.max_chars]
        if truncated:
            text += f"\n[the page is longer than {self.max_bytes} bytes: the rest was not read]"
        return FetchedPage(
            url=url[:8192],
            status=status,
            content_type=content_type[:256],
            text=text,
            cut=cut,
            redirects=tuple(r[:8192] for r in redirects),
            full_text=full_text,
        )


def _require_text(url: str, content_type: str) -> None:
    kind = content_type.split(";", maxsplit=1)[0].strip().lower()
    if kind and not kind.startswith(_TEXT_TYPES):
        raise InvalidInput(
            f"{url[:200]} is {kind}, not text: fetch_url reads pages only (download files "
            "with a skill that declares the host)"
        )
