"""The egress service's settings, from `BASTION_EGRESS_*` variables."""

from __future__ import annotations

from bastion.shared.settings import BusSettings

__all__ = ["EgressSettings"]


class EgressSettings(BusSettings, frozen=True, kw_only=True):
    """Where the proxy listens, what it may reach, and how much one connection may carry."""

    egress_listen: str = "127.0.0.1:0"
    """`host:port` (port 0 picks a free one)."""
    egress_advertise: str = ""
    """The `host:port` grants name as the proxy, when others reach it by another address than
    the one it listens on (a container listening on 0.0.0.0:3128 behind the name `egress`);
    empty: the address it listens on."""
    egress_allow_ranges: str = ""
    """Operator ranges reached despite the deny list, comma-separated CIDR (`10.8.0.0/16`)."""
    egress_upstream: str = ""
    """An upstream proxy `host:port`: every connection is a CONNECT through it."""
    egress_max_bytes: int = 1024 * 1024 * 1024
    """Bytes one proxied connection may carry, both directions together."""
    egress_max_duration_s: float = 600.0
    egress_idle_timeout_s: float = 60.0
    egress_connect_timeout_s: float = 10.0
    egress_resolve_timeout_s: float = 5.0
    egress_grant_max_ttl_s: float = 3600.0
    """The grants bucket's TTL: no grant outlives it, whatever it asked for."""
    egress_fetch_max_bytes: int = 5 * 1024 * 1024
    """Bytes of a page `fetch_url` reads; the rest is not downloaded."""
    egress_fetch_max_chars: int = 100_000
    """Characters of text a `fetch_url` reply carries; the rest is cut and said so."""
    egress_fetch_timeout_s: float = 30.0
    egress_fetch_keep_max_chars: int = 1_000_000
    """Characters of a cut page's whole text sent back to be kept in the workspace."""
    search: str = ""
    """`BASTION_SEARCH`: `searxng:<url>`, `brave` or `tavily`; empty, no `web_search`."""
    egress_brave_url: str = "https://api.search.brave.com"
    egress_tavily_url: str = "https://api.tavily.com"
    egress_search_timeout_s: float = 15.0
