"""The egress service's messages: grants for the proxy, their connection log, fetched pages.

A grant lets one call's programs through the egress proxy to the hosts it declares, until
it expires. The proxy keeps it in the JetStream KV bucket `bastion_egress_grants` (key:
the grant id) holding only a hash of its secret; the secret itself travels once, in the
`EgressGrant` reply, and then in the program's `Proxy-Authorization` header.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal

import msgspec

from bastion.proto._base import Identifier, Message, SessionId, Text

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_FORM_DIGESTS",
    "ConnectionLog",
    "ConnectionsRequest",
    "EgressGrant",
    "FetchedPage",
    "FormDigest",
    "GrantRecord",
    "GrantRequest",
    "HostPattern",
    "SearchHit",
    "SearchRequest",
    "SearchResults",
]

MAX_CONNECTIONS: Final = 200
"""At most this many connection lines are kept per grant; later ones are only counted."""

HostPattern = Annotated[
    str, msgspec.Meta(min_length=1, max_length=300, pattern=r"^[A-Za-z0-9*.\-:\[\]]+$")
]
"""A declared host: `api.github.com`, `*.example.org:8443` (ports 443 and 80 if none)."""

GrantId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}$")]

MAX_FORM_DIGESTS: Final = 4096
"""At most this many digests of secret values' forms travel with one grant."""


class FormDigest(Message, frozen=True, kw_only=True, tag="egress.form_digest"):
    """One form of a secret value as the egress service may know it: its length and its
    keyed digest (BLAKE2b-128 under the grant's `cut_salt`), never the value.

    The proxy hashes every stretch of that length of a host name or connection line it is
    about to log or store and cuts the ones that match (`bastion.shared.hostcuts`).
    """

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    length: Annotated[int, msgspec.Meta(ge=1, le=65536)]
    digest: Annotated[bytes, msgspec.Meta(min_length=16, max_length=16)]


FormDigests = Annotated[tuple[FormDigest, ...], msgspec.Meta(max_length=MAX_FORM_DIGESTS)]
CutSalt = Annotated[bytes, msgspec.Meta(max_length=64)]


class GrantRequest(Message, frozen=True, kw_only=True, tag="egress.grant_request"):
    """Let one call of a session through the proxy to `hosts` (or any public host) for a while."""

    session_id: SessionId
    tenant: Identifier
    hosts: tuple[HostPattern, ...] = ()
    any_public_host: bool = False
    """The skill declared `true`: every public host, on ports 443 and 80."""
    ttl_s: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 300.0
    call_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    cut_salt: CutSalt = b""
    """The key of `cuts`' digests: random, one per grant."""
    cuts: FormDigests = ()
    """The forms of the tenant's secret values to cut from what the proxy logs and stores."""


class EgressGrant(Message, frozen=True, kw_only=True, tag="egress.grant"):
    """An issued grant: the credentials a program sends as `Proxy-Authorization: Basic`."""

    grant_id: GrantId
    secret: Annotated[str, msgspec.Meta(max_length=128)]
    expires_at: datetime
    proxy: Annotated[str, msgspec.Meta(max_length=4096)]
    """Where the proxy listens: `host:port`."""


class GrantRecord(Message, frozen=True, kw_only=True, tag="egress.grant_record"):
    """A grant as the proxy keeps it: its secret only as a SHA-256 digest."""

    grant_id: GrantId
    secret_sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    session_id: SessionId
    tenant: Identifier
    hosts: tuple[HostPattern, ...]
    any_public_host: bool
    expires_at: datetime
    call_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    cut_salt: CutSalt = b""
    cuts: FormDigests = ()


class ConnectionsRequest(Message, frozen=True, kw_only=True, tag="egress.connections_request"):
    """The connections a grant's programs made or tried, in order."""

    grant_id: GrantId
    revoke: bool = False
    """End the grant first: its call is over, so its credentials let nothing through."""


class ConnectionLog(Message, frozen=True, kw_only=True, tag="egress.connection_log"):
    """Each connection as `host:port allowed` or `host:port refused: reason`."""

    grant_id: GrantId
    lines: tuple[Annotated[str, msgspec.Meta(max_length=600)], ...] = ()
    more: int = 0
    """Connections past `MAX_CONNECTIONS`, counted but not kept."""

    def summary(self) -> str:
        """`connections: a:443 allowed; b:443 refused: not a declared host`."""
        if not self.lines:
            return "connections: none"
        more = f"; and {self.more} more" if self.more else ""
        return "connections: " + "; ".join(self.lines) + more


class FetchedPage(Message, frozen=True, kw_only=True, tag="egress.fetched_page"):
    """A page `egress.fetch` read: its final address, type and text (cut to the limit)."""

    url: Annotated[str, msgspec.Meta(max_length=8192)]
    status: int
    content_type: Annotated[str, msgspec.Meta(max_length=256)]
    text: str
    cut: int = 0
    """Characters left out at the end: the page was longer than the reply may be."""
    redirects: tuple[Annotated[str, msgspec.Meta(max_length=8192)], ...] = ()
    full_text: Text = ""
    """The whole text when the reply was cut (bounded by the service), for the workspace."""


class SearchRequest(Message, frozen=True, kw_only=True, tag="egress.search"):
    """Search the web for a session through the configured provider."""

    session_id: SessionId
    tenant: Annotated[str, msgspec.Meta(max_length=64)] = ""
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=400)]
    count: Annotated[int, msgspec.Meta(ge=1, le=10)] = 5
    freshness: Literal["day", "week", "month", "year"] | None = None
    """Only results from the past day, week, month or year."""


class SearchHit(Message, frozen=True, kw_only=True, tag="egress.search_hit"):
    """One result: its title, address and snippet."""

    title: Annotated[str, msgspec.Meta(max_length=500)]
    url: Annotated[str, msgspec.Meta(max_length=8192)]
    snippet: Annotated[str, msgspec.Meta(max_length=2000)] = ""


class SearchResults(Message, frozen=True, kw_only=True, tag="egress.search_results"):
    """The results of an `egress.search`, at most the count asked for, best first."""

    provider: Annotated[str, msgspec.Meta(max_length=32)]
    hits: tuple[SearchHit, ...] = ()
