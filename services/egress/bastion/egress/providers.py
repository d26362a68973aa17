"""Web search providers: how each is configured, asked, and how its answer is read.

`BASTION_SEARCH` names one: `searxng:<base URL>`, `brave` (key `BRAVE_SEARCH_API_KEY`) or
`tavily` (key `TAVILY_API_KEY`); the keys come from the egress service's own environment.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from bastion.proto.egress import SearchHit
from bastion.shared.errors import InvalidInput

__all__ = ["Provider", "ProviderRequest", "provider_from", "read_hits"]

_KEYS = {"brave": "BRAVE_SEARCH_API_KEY", "tavily": "TAVILY_API_KEY"}
_BRAVE_FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}
_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True)
class ProviderRequest:
    """The HTTP request one search becomes."""

    method: str
    url: str
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""


@dataclass(frozen=True)
class Provider:
    """A configured provider: its kind, its base URL and its key (none for SearXNG)."""

    kind: str
    base_url: str
    key: str = ""

    def request(self, query: str, count: int, freshness: str | None) -> ProviderRequest:
        """The request that asks this provider for `count` results of `query`."""
        accept = (b"Accept", b"application/json")
        agent = (b"User-Agent", b"bastion-search/1")
        if self.kind == "searxng":
            params = {"q": query, "format": "json"}
            if freshness:
                params["time_range"] = freshness
            return ProviderRequest(
                "GET", f"{self.base_url}/search?{urlencode(params)}", [accept, agent]
            )
        if self.kind == "brave":
            params = {"q": query, "count": str(count)}
            if freshness:
                params["freshness"] = _BRAVE_FRESHNESS[freshness]
            token = (b"X-Subscription-Token", self.key.encode())
            url = f"{self.base_url}/res/v1/web/search?{urlencode(params)}"
            return ProviderRequest("GET", url, [accept, agent, token])
        payload: dict[str, Any] = {"api_key": self.key, "query": query, "max_results": count}
        if freshness:
            payload["time_range"] = freshness
        content = (b"Content-Type", b"application/json")
        return ProviderRequest(
            "POST",
            f"{self.base_url}/search",
            [accept, agent, content],
            json.dumps(payload).encode(),
        )


def provider_from(
    spec: str, environ: Mapping[str, str], brave_url: str, tavily_url: str
) -> Provider | None:
    """The provider `spec` names, None when it is empty.

    Raises:
        InvalidInput: an unknown provider, a SearXNG without a URL, or a missing key.
    """
    spec = spec.strip()
    if not spec:
        return None
    kind, _, rest = spec.partition(":")
    kind = kind.lower()
    if kind == "searxng":
        if not rest.startswith(("http://", "https://")):
            raise InvalidInput("BASTION_SEARCH=searxng needs its URL: searxng:https://host")
        return Provider("searxng", rest.rstrip("/"))
    if kind not in _KEYS:
        raise InvalidInput(
            f"BASTION_SEARCH={spec[:40]!r} is not a provider: searxng:<url>, brave or tavily"
        )
    key = environ.get(_KEYS[kind], "")
    if not key:
        raise InvalidInput(f"BASTION_SEARCH={kind} needs {_KEYS[kind]} in the environment")
    return Provider(kind, (brave_url if kind == "brave" else tavily_url).rstrip("/"), key)


def _clean(value: object, limit: int) -> str:
    text = html.unescape(_TAG.sub("", value if isinstance(value, str) else ""))
    return " ".join(text.split())[:limit]


def read_hits(kind: str, answer: Any, count: int) -> tuple[SearchHit, ...]:
    """The first `count` results of a provider's JSON answer, tags and spacing cleaned."""
    items: Any = answer.get("web", {}).get("results") if kind == "brave" else answer.get("results")
    snippet_key = "description" if kind == "brave" else "content"
    hits = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        hits.append(
            SearchHit(
                title=_clean(item.get("title"), 500) or item["url"][:500],
                url=item["url"][:8192],
                snippet=_clean(item.get(snippet_key), 2000),
            )
        )
        if len(hits) == count:
            break
    return tuple(hits)
