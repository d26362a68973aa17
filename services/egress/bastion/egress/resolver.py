"""Name resolution, behind a seam: the proxy asks a `Resolver`, tests give it fixed answers."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping, Sequence
from typing import Protocol

import anyio

from bastion.egress.errors import Unreachable
from bastion.shared.netclass import IPAddress

__all__ = ["FixedResolver", "Resolver", "SystemResolver", "numeric_host"]


class Resolver(Protocol):
    """Turns a host name into addresses. It does not judge them: the caller classifies."""

    async def resolve(self, host: str, port: int) -> Sequence[IPAddress]:
        """Every address of `host`; raises `Unreachable` when there is none."""
        ...


def _addresses(infos: Sequence[tuple[object, ...]]) -> list[IPAddress]:
    found: list[IPAddress] = []
    for info in infos:
        sockaddr = info[4]
        assert isinstance(sockaddr, tuple)
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    return found


def numeric_host(host: str) -> list[IPAddress] | None:
    """The address libc reads in `host` without asking DNS (`127.1`, `0x7f000001`), or None.

    This is the parser the connection would use, so `2130706433` is 127.0.0.1 here too.
    """
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        return None
    return _addresses(infos)


class SystemResolver:
    """The system's `getaddrinfo`, with a deadline."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self._timeout_s = timeout_s

    async def resolve(self, host: str, port: int) -> Sequence[IPAddress]:
        numeric = numeric_host(host)
        if numeric is not None:
            return numeric
        try:
            with anyio.fail_after(self._timeout_s):
                infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError, TimeoutError):
            raise Unreachable(f"{host} does not resolve: check the name") from None
        return _addresses(infos)


class FixedResolver:
    """Fixed answers by name, for tests: numeric hosts are read as the system reads them."""

    def __init__(self, names: Mapping[str, Sequence[str]]) -> None:
        self._names = {k: [ipaddress.ip_address(a) for a in v] for k, v in names.items()}

    async def resolve(self, host: str, port: int) -> Sequence[IPAddress]:
        numeric = numeric_host(host)
        if numeric is not None:
            return numeric
        if host not in self._names:
            raise Unreachable(f"{host} does not resolve: check the name")
        return self._names[host]
