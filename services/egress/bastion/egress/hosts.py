"""Declared hosts: parsing `api.github.com` or `*.example.org:8443`, and matching a target."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bastion.egress.errors import Refused
from bastion.shared.hostnames import InvalidHostName, ascii_host

__all__ = [
    "DEFAULT_PORTS",
    "Declared",
    "host_header",
    "is_declared",
    "normalize_host",
    "split_target",
]

DEFAULT_PORTS = frozenset({443, 80})


def normalize_host(host: str) -> str:
    """Lower case, trailing dots dropped, IDNA 2008 (`xn--` form): how names are compared.

    Raises:
        Refused: a name IDNA 2008 refuses; the reason says why.
    """
    try:
        return ascii_host(host)
    except InvalidHostName as error:
        raise Refused(host[:200], error.message) from None


def host_header(host: str, port: int | None) -> bytes:
    """The `Host` header naming normalized `host` (and `port`, when the URL names one)."""
    named = f"[{host}]" if ":" in host else host
    return (named if port is None else f"{named}:{port}").encode("ascii")


def split_target(target: str, default_port: int | None = None) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets) as its normalized host and port.

    Raises:
        Refused: no port where one is needed, or a port out of range.
    """
    if target.startswith("["):
        end = target.find("]")
        host, rest = target[1:end], target[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
    elif target.count(":") == 1:
        host, port_text = target.split(":")
    else:
        host, port_text = target, ""
    if not port_text:
        if default_port is None:
            raise Refused(target, "no port named")
        return normalize_host(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise Refused(target, f"port {port_text!r} is not a port")
    if not host:
        raise Refused(target, "no host named")
    return normalize_host(host), int(port_text)


@dataclass(frozen=True)
class Declared:
    """One declared host: a name or `*.suffix`, and its ports."""

    host: str
    ports: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> Declared:
        wildcard = text.startswith("*.")
        host, port = split_target(text[2:] if wildcard else text, default_port=0)
        ports = DEFAULT_PORTS if port == 0 else frozenset({port})
        return cls(("*." if wildcard else "") + host, ports)

    def matches(self, host: str) -> bool:
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])  # any depth below it, never the apex
        return host == self.host


def is_declared(host: str, port: int, declared: Sequence[str], any_public_host: bool) -> str | None:
    """None if `host:port` is declared; otherwise why not."""
    if any_public_host:
        return None if port in DEFAULT_PORTS else f"port {port} is not declared"
    patterns = [Declared.parse(d) for d in declared]
    named = [p for p in patterns if p.matches(host)]
    if not named:
        return "not a declared host"
    if not any(port in p.ports for p in named):
        return f"port {port} is not declared for {host}"
    return None
