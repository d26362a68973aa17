"""`web_search`: one request to the configured provider, made the way `fetch_url` connects."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field

import anyio

from bastion.egress.dial import Dialer
from bastion.egress.errors import Unreachable
from bastion.egress.pinned import Hop, pinned_request
from bastion.egress.providers import Provider, read_hits
from bastion.proto.egress import SearchRequest, SearchResults
from bastion.shared.errors import InvalidInput

__all__ = ["Searcher"]

MAX_ANSWER = 2 * 1024 * 1024


@dataclass(eq=False)
class Searcher:
    """Asks the provider: its address resolved, classified and connected to as checked."""

    dialer: Dialer
    provider: Provider | None
    timeout_s: float
    _ssl: ssl.SSLContext = field(default_factory=ssl.create_default_context, init=False)

    async def search(self, ask: SearchRequest, hops: list[Hop]) -> SearchResults:
        """Up to `ask.count` results; the provider's request is appended to `hops`.

        Raises:
            InvalidInput: no provider is configured, or its answer is not results.
            Refused: the provider's address is refused.
            Unreachable: it does not resolve, answer, or finish in time, or says no.
        """
        provider = self.provider
        if provider is None:
            raise InvalidInput("web search is not configured: the operator sets BASTION_SEARCH")
        made = provider.request(ask.query, ask.count, ask.freshness)
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await pinned_request(
                    self.dialer,
                    self._ssl,
                    made.url,
                    method=made.method,
                    headers=made.headers,
                    body=made.body,
                    max_bytes=MAX_ANSWER,
                    hops=hops,
                )
        except TimeoutError:
            raise Unreachable(
                f"the {provider.kind} search did not answer within {self.timeout_s:g} s"
            ) from None
        if reply.status != 200:
            raise Unreachable(f"the {provider.kind} search answered {reply.status}")
        try:
            answer = json.loads(reply.body)
        except ValueError:
            raise InvalidInput(f"the {provider.kind} search did not answer JSON") from None
        if not isinstance(answer, dict):
            raise InvalidInput(f"the {provider.kind} search did not answer results")
        return SearchResults(
            provider=provider.kind, hits=read_hits(provider.kind, answer, ask.count)
        )
