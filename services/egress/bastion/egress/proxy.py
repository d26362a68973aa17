"""The forward proxy: CONNECT tunnels and plain HTTP, each connection under a grant.

Order for every connection: read the head (bounded), check the grant (407), check the
Host header of a plain request against its request line, check the target is declared,
resolve and classify (`Dialer.check`), connect to the checked address, and only then
carry bytes. Each connection that names a grant is recorded, allowed or refused, with the
forms of the tenant's secret values the grant has digests of cut out of the line first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
from anyio.abc import SocketAttribute, SocketStream

from bastion.egress.connlog import ConnectionRecorder
from bastion.egress.dial import Dialer, read_head
from bastion.egress.errors import GrantRefused, Refused, Unreachable
from bastion.egress.grants import GrantStore, credentials, cutter
from bastion.egress.hosts import is_declared, normalize_host, split_target
from bastion.egress.httphead import RequestHead, answer, parse_head
from bastion.egress.pipe import Bounds, pipe
from bastion.proto.egress import GrantRecord

__all__ = ["EgressProxy"]

logger = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 10.0


@dataclass(eq=False)
class EgressProxy:
    """Serves the proxy on a listener; `serving()` yields the address it listens on."""

    grants: GrantStore
    recorder: ConnectionRecorder
    dialer: Dialer
    bounds: Bounds

    @asynccontextmanager
    async def serving(self, listen: str) -> AsyncIterator[str]:
        """Listen on `host:port` (or `unix:/path`) until the block exits."""
        if listen.startswith("unix:"):
            listener = await anyio.create_unix_listener(listen[5:])
            # A sandbox connects as its own unprivileged host user, not the service's: the
            # socket's directory decides who may reach it, and every connection needs a grant.
            os.chmod(listen[5:], 0o666)
            address = listen
        else:
            host, _, port = listen.rpartition(":")
            tcp = await anyio.create_tcp_listener(
                local_host=host.strip("[]") or "127.0.0.1", local_port=int(port or 0)
            )
            bound = tcp.extra(SocketAttribute.local_address)
            assert isinstance(bound, tuple)
            self.dialer.own.add((str(bound[0]), int(bound[1])))
            address = f"{bound[0]}:{bound[1]}"
            listener = tcp  # type: ignore[assignment]
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, self._handle)
            try:
                yield address
            finally:
                group.cancel_scope.cancel()

    async def _handle(self, client: SocketStream) -> None:
        async with client:
            try:
                await self._serve(client)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # the client went away: nothing to answer
            except Exception:
                logger.exception("the proxy failed on a connection")

    async def _serve(self, client: SocketStream) -> None:
        buffer = bytearray()
        try:
            with anyio.fail_after(HEAD_TIMEOUT_S):
                head = parse_head(await read_head(client, buffer))
        except TimeoutError:
            await client.send(answer(408, "Request Timeout", "the request head took too long"))
            return
        except Refused as error:
            await client.send(answer(400, "Bad Request", error.message))
            return
        try:
            grant = await self.grants.check(*credentials(_one(head, "Proxy-Authorization")))
        except GrantRefused as error:
            await client.send(
                answer(
                    407,
                    "Proxy Authentication Required",
                    error.message,
                    {"Proxy-Authenticate": 'Basic realm="bastion egress"'},
                )
            )
            return
        target = head.target
        try:
            if head.method == "CONNECT":
                host, port = split_target(head.target)
                path = ""
            else:
                host, port, path = _plain_target(head)
            target = f"{host}:{port}"
            reason = is_declared(host, port, grant.hosts, grant.any_public_host)
            if reason is not None:
                raise Refused(target, reason)
            address = await self.dialer.check(host, port)
        except Refused as error:
            await self._record(grant, error.target, error.reason)
            await client.send(
                answer(403, "Forbidden", error.message, {"X-Bastion-Refused": error.reason})
            )
            return
        except Unreachable as error:
            await self._record(grant, target, "does not resolve")
            await client.send(answer(502, "Bad Gateway", error.message))
            return
        try:
            upstream = await self.dialer.connect(address, port)
        except Unreachable as error:
            await self._record(grant, target, "did not accept a connection")
            await client.send(answer(502, "Bad Gateway", error.message))
            return
        await self._record(grant, target, None)
        async with upstream:
            if head.method == "CONNECT":
                await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await pipe(client, upstream, self.bounds, bytes(buffer))
            else:
                await pipe(client, upstream, self.bounds, head.forwarded(path) + bytes(buffer))

    async def _record(self, grant: GrantRecord, target: str, refused: str | None) -> None:
        await self.recorder.record(
            session_id=grant.session_id,
            tenant=grant.tenant,
            target=target,
            refused=refused,
            grant_id=grant.grant_id,
            call_id=grant.call_id,
            cut=cutter(grant).cut,
        )


def _one(head: RequestHead, name: str) -> str | None:
    values = head.get(name)
    return values[0] if len(values) == 1 else None


def _plain_target(head: RequestHead) -> tuple[str, int, str]:
    """Host, port and origin-form path of a plain request; its Host header must agree.

    Raises:
        Refused: not an absolute `http://` URI, or a Host header naming another site.
    """
    url = urlsplit(head.target)
    if url.scheme != "http" or not url.hostname:
        raise Refused(head.target[:200], "a plain request must name an http:// URL")
    try:
        port = url.port or 80
    except ValueError:
        raise Refused(head.target[:200], "its port is not a port") from None
    host = normalize_host(url.hostname)
    hosts = head.get("Host")
    if len(hosts) != 1:
        raise Refused(f"{host}:{port}", "a plain request needs exactly one Host header")
    named, named_port = split_target(hosts[0], default_port=80)
    if (named, named_port) != (host, port):
        raise Refused(f"{host}:{port}", f"the Host header names {named}:{named_port}, another site")
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    return host, port, path
