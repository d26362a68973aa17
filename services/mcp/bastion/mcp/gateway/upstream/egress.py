"""How an upstream's HTTP leaves: through the egress proxy, under a grant for its host.

DESIGN §1, §6: only the egress service reaches the internet. The mcp service asks it for
a grant naming the server's `host:port` (`grant_for`, on `bastion.egress.grant`), and
sends every request of the connection through the proxy the grant names, with the
grant's credentials as `Proxy-Authorization: Basic` (an https URL is a CONNECT tunnel, a
plain http one an absolute-form request). The proxy resolves the host itself and refuses
private and loopback addresses unless the operator allows a range
(`BASTION_EGRESS_ALLOW_RANGES`, e.g. `127.0.0.0/8` for a server on this machine).

The proxy may listen on `host:port` or on a Unix socket (`unix:/path`, as under `bastion
up`): then every connection the client opens goes to that socket, whatever host it names.

Without a route (`egress=None`) only a loopback URL is reached, directly: a server on the
gateway's own machine, as in development and tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

import httpcore2
import httpx2

from bastion.mcp.gateway.upstream.errors import UpstreamUnreachable
from bastion.proto import subjects
from bastion.proto.egress import EgressGrant, GrantRequest
from bastion.shared.bus import Client, request
from bastion.shared.hostnames import InvalidHostName, ascii_host
from bastion.shared.netclass import is_loopback_host

__all__ = ["EgressRoute", "grant_for", "host_and_port", "is_loopback_url"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


@dataclass(frozen=True)
class EgressRoute:
    """The egress proxy (`host:port`) and the grant its requests carry."""

    proxy: str
    grant_id: str
    secret: str = field(repr=False)

    @classmethod
    def from_grant(cls, grant: EgressGrant) -> EgressRoute:
        """The route an `EgressGrant` reply describes."""
        return cls(proxy=grant.proxy, grant_id=grant.grant_id, secret=grant.secret)

    def transport(self, limits: httpx2.Limits) -> httpx2.AsyncHTTPTransport:
        """An HTTP transport sending every request through the proxy, with the grant's
        credentials (kept out of any URL)."""
        if not self.proxy.startswith("unix:"):
            proxy = httpx2.Proxy(f"http://{self.proxy}", auth=(self.grant_id, self.secret))
            return httpx2.AsyncHTTPTransport(trust_env=False, proxy=proxy, limits=limits)
        transport = httpx2.AsyncHTTPTransport(trust_env=False, limits=limits)
        # httpx2 proxies over TCP only: the same proxy connection pool, given a network
        # backend that dials the socket, takes the transport's own pool's place.
        transport._pool = httpcore2.AsyncHTTPProxy(
            proxy_url=httpcore2.URL(scheme=b"http", host=b"egress", port=80, target=b"/"),
            proxy_auth=(self.grant_id.encode(), self.secret.encode()),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            network_backend=_SocketBackend(self.proxy.removeprefix("unix:")),
        )
        return transport


class _SocketBackend(httpcore2.AsyncNetworkBackend):
    """Every connection to the Unix socket of the egress proxy, whatever host is named."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(self._path, timeout, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(self._path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def host_and_port(url: str) -> tuple[str, int]:
    """The host (compared form: lower case, `xn--`, IPv6 without brackets) and port an
    http(s) URL names."""
    parts = urlsplit(url)
    try:
        host = ascii_host(parts.hostname or "")
    except InvalidHostName as error:
        raise UpstreamUnreachable(f"the MCP server's URL names no usable host: {error}") from None
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    except ValueError:
        raise UpstreamUnreachable(f"the MCP server's URL {url[:200]} has no valid port") from None
    return host, port


def is_loopback_url(url: str) -> bool:
    """Whether the URL names this machine (`localhost`, 127.0.0.0/8, ::1)."""
    host, _ = host_and_port(url)
    return is_loopback_host(host)


async def grant_for(
    client: Client,
    url: str,
    *,
    session_id: str,
    tenant: str,
    ttl_s: float,
    call_id: str = "",
    timeout_s: float = 10.0,
) -> EgressRoute:
    """Ask the egress service for a grant to the URL's `host:port`, as a route.

    Raises:
        RemoteError / Unavailable: the egress service refused or did not answer.
    """
    host, port = host_and_port(url)
    named = f"[{host}]" if ":" in host else host
    grant: EgressGrant = await request(
        client,
        subjects.EGRESS_GRANT,
        GrantRequest(
            session_id=session_id,
            tenant=tenant,
            hosts=(f"{named}:{port}",),
            ttl_s=ttl_s,
            call_id=call_id,
        ),
        EgressGrant,
        timeout_s=timeout_s,
    )
    return EgressRoute.from_grant(grant)
