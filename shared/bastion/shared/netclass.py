"""Is a resolved address one the outside may be reached at? The egress deny list.

Only *resolved* addresses are judged: `getaddrinfo` reads `2130706433`, `0x7f000001`,
`127.1` and `0177.0.0.1` as 127.0.0.1 while `ipaddress` refuses them, so a check of the
name as written is bypassable. `ipaddress.is_global` alone is not enough either: it calls
multicast, and NAT64 or 6to4 wrappers of private addresses, global. So the named ranges
are checked first, IPv6 forms that embed an IPv4 address are judged by the address they
embed, and anything else `ipaddress` does not call global is refused too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Final

from bastion.shared.errors import InvalidInput

__all__ = ["IPAddress", "IPNetwork", "classify", "is_loopback_host", "parse_ranges"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA: Final = ipaddress.ip_address("169.254.169.254")

_V4_RANGES: Final = tuple(
    (ipaddress.IPv4Network(net), kind)
    for net, kind in (
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "shared (carrier-grade NAT)"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/4", "multicast"),
        ("198.18.0.0/15", "benchmarking"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
        ("192.0.2.0/24", "documentation"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("192.0.0.0/24", "protocol-assignment"),
    )
)

_V6_RANGES: Final = tuple(
    (ipaddress.IPv6Network(net), kind)
    for net, kind in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated private)"),
        ("ff00::/8", "multicast"),
        ("2001:db8::/32", "documentation"),
    )
)

_NAT64: Final = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_SIIT: Final = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")
_LOW32: Final = 0xFFFFFFFF


def _embedded(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries: IPv4-mapped (::ffff:0:0/96), SIIT
    (::ffff:0:0:0/96), IPv4-compatible (::/96, but for :: and ::1 themselves), NAT64
    (64:ff9b::/96, 64:ff9b:1::/48), 6to4 (2002::/16) or the Teredo client (2001::/32)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    low = ipaddress.IPv4Address(int(address) & _LOW32)
    if address in _SIIT or any(address in net for net in _NAT64):
        return low
    if address in _COMPATIBLE and int(address) > 1:
        return low
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client, stored XOR 0xffffffff; Python undoes that
    return None


def _kind(address: IPAddress) -> str | None:
    """The name of the refused range `address` lies in, or None for a public address."""
    ranges: Iterable[tuple[IPNetwork, str]] = (
        _V4_RANGES if isinstance(address, ipaddress.IPv4Address) else _V6_RANGES
    )
    for net, kind in ranges:
        if address in net:
            if address == METADATA:
                return "link-local (cloud metadata)"
            return kind
    if not address.is_global or address.is_multicast:
        return "non-public"
    return None


def classify(address: IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """None if `address` may be reached; otherwise the reason it may not, as a phrase.

    `allowed` are the operator's ranges: an address in one of them (or an IPv6 address
    embedding one in them) is reached whatever else it is.
    """
    inner = _embedded(address) if isinstance(address, ipaddress.IPv6Address) else None
    if any(address in net for net in allowed) or (
        inner is not None and any(inner in net for net in allowed)
    ):
        return None
    if inner is not None:
        kind = _kind(inner)
        return None if kind is None else f"{kind} address {inner} (embedded in {address})"
    kind = _kind(address)
    return None if kind is None else f"{kind} address {address}"


def parse_ranges(text: str) -> tuple[IPNetwork, ...]:
    """Comma- or space-separated CIDR ranges (`127.0.0.0/8, ::1/128`) as networks.

    Raises:
        InvalidInput: a range does not parse; the sentence names it.
    """
    ranges: list[IPNetwork] = []
    for item in text.replace(",", " ").split():
        try:
            ranges.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise InvalidInput(
                f"{item!r} is not an address range: write it as CIDR, like 127.0.0.0/8"
            ) from None
    return tuple(ranges)


def is_loopback_host(host: str) -> bool:
    """Whether a host name or address names this machine (`localhost`, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
