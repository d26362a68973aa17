"""`open_upstream`: start or reach a server, find which era of MCP it speaks, and greet it.

The era: `2026-07-28` is tried first (a `server/discover` probe, the SDK's `mode="auto"`),
then the `initialize` handshake of 2025-11-25 and before; a server that spoke a handshake
version at its review is greeted with the handshake straight away. The whole start — the
process or the HTTP exchange, and the handshake — is bounded by `connect_timeout_s`.

Once greeted, the connection watches for the server saying its tools changed: the
`notifications/tools/list_changed` of the handshake era, or a `subscriptions/listen` stream
of 2026-07-28; either makes every listing of the connection asked for before it stale
(`ToolListing`).
"""

from __future__ import annotations

import logging
import math
import os
import shlex
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client, types
from mcp.client._transport import TransportStreams
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from bastion.mcp.gateway.upstream.egress import EgressRoute
from bastion.mcp.gateway.upstream.errors import UpstreamUnreachable, quoted
from bastion.mcp.gateway.upstream.handlers import Asking, UpstreamHandlers
from bastion.mcp.gateway.upstream.http import HTTP_TRANSPORTS, http_transport
from bastion.mcp.gateway.upstream.isolate import UNREACHED
from bastion.mcp.gateway.upstream.launch import Launch, launching
from bastion.mcp.gateway.upstream.limits import UpstreamLimits
from bastion.mcp.gateway.upstream.link import Link
from bastion.mcp.gateway.upstream.listing import ToolListing
from bastion.mcp.gateway.upstream.stdio import stdio_streams
from bastion.mcp.gateway.upstream.upstream import Upstream
from bastion.proto.mcp import McpServerSpec
from bastion.shared.version import VERSION

__all__ = ["open_upstream"]

logger = logging.getLogger(__name__)

CLIENT_INFO: Final = types.Implementation(name="bastion", version=VERSION)
NO_HANDLERS: Final = UpstreamHandlers()
DEFAULT_LIMITS: Final = UpstreamLimits()
RELISTEN_S: Final = 1.0
"""How long after a server's stream of change events ended another is opened."""
_SANDBOX_HINT: Final = (
    "check that bubblewrap runs for the service's user and that unprivileged user "
    "namespaces are enabled"
)


def _single(error: BaseException) -> BaseException:
    """The one error inside nested single-member exception groups (task groups wrap)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _sandbox_started(launch: Launch) -> bool:
    """Whether bwrap reported its child (always True for an unsandboxed launch)."""
    if launch.status_fd is None:
        return True
    os.set_blocking(launch.status_fd, False)
    try:
        return b'"child-pid"' in os.read(launch.status_fd, 65536)
    except OSError:
        return False


def shown_url(url: str) -> str:
    """The URL without credentials, query or fragment: what a message may show of it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    named = f"[{host}]" if ":" in host else host
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return quoted(f"{parts.scheme}://{named}{port}{parts.path}", 200)


def _what(spec: McpServerSpec) -> str:
    if spec.transport == "http":
        return f"at {shown_url(spec.url or '')}"
    return f"(`{quoted(shlex.join(spec.command), 200)}`)"


def _failed(
    spec: McpServerSpec, server: str, link: Link, launch: Launch | None, error: BaseException
) -> UpstreamUnreachable:
    """The sentence for a server that could not be started, reached or greeted."""
    what = f"the MCP server {server} {_what(spec)}"
    if launch is not None and not _sandbox_started(launch):
        return UpstreamUnreachable(f"the sandbox of {what} did not start: {_SANDBOX_HINT}")
    if isinstance(error, OSError) and spec.transport == "stdio":
        reason = error.strerror or type(error).__name__
        return UpstreamUnreachable(
            f"{what} could not be started ({reason}): check the program is installed "
            "where the server runs and may be run"
        )
    if isinstance(error, httpx2.TransportError) and link.alive:
        link.break_with(f"{UNREACHED} ({type(error).__name__})")
    if (link.reason or "").startswith(UNREACHED):
        return UpstreamUnreachable(
            f"{what} {link.reason}: check the URL, and that the server is up and the egress "
            "service lets the mcp service reach it"
        )
    if isinstance(error, MCPError) and link.alive and error.code != types.CONNECTION_CLOSED:
        return UpstreamUnreachable(
            f"{what} refused the MCP handshake ({error.code}: {quoted(error.message)!r}): "
            "check it is an MCP server"
        )
    reason = link.reason or "did not complete the MCP handshake"
    contained = ""
    if spec.transport == "stdio" and spec.sandbox != "none":
        contained = (
            "; in its sandbox it sees only the system, its --dir and what --sandbox-read "
            "shows: a program from a virtual environment needs that environment and the "
            "Python it was made from shown (--sandbox-read for each)"
        )
    return UpstreamUnreachable(
        f"{what} {reason} before its handshake was done: check that it runs by itself and "
        "speaks MCP"
        + (" on its standard output" if spec.transport == "stdio" else " there")
        + contained
    )


class _Refused(Exception):
    """The server answered the handshake with an HTTP or JSON-RPC error: another
    transport may be tried before giving up."""

    def __init__(self, error: UpstreamUnreachable) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True)
class _Plan:
    """What `open_upstream` was asked: where the server is and how to speak to it."""

    spec: McpServerSpec
    server: str
    values: Mapping[str, str]
    handlers: UpstreamHandlers
    mode: str
    egress: EgressRoute | None
    limits: UpstreamLimits


def _notices(listing: ToolListing) -> MessageHandlerFnT:
    """The SDK's `message_handler`: a tools list-changed notification makes `listing` stale."""

    async def handle(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            listing.changed()

    return handle


async def _watch_tools(client: Client, listing: ToolListing, server: str, link: Link) -> None:
    """On a 2026-07-28 connection, listen for the server's tools changing (its events reach
    `_notices` too). Each time a stream ends (an HTTP stream silent past its read timeout)
    the listing is made stale, as an event may have been missed, and another is opened
    `RELISTEN_S` later; a server that refuses the stream has its listing made stale once,
    and only the check's age bound keeps it fresh from then on."""
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return
    while link.alive:
        opened = False
        try:
            async with client.listen(tools_list_changed=True) as changes:
                opened = True
                async for _ in changes:
                    listing.changed()
        except Exception as error:  # what a server does here never ends its connection
            logger.info("the stream of MCP server %s's tool changes ended: %r", server, error)
        listing.changed()
        if not opened:
            return
        await anyio.sleep(RELISTEN_S)


@asynccontextmanager
async def _connected(
    plan: _Plan,
    transport: AbstractAsyncContextManager[TransportStreams],
    link: Link,
    launch: Launch | None,
) -> AsyncIterator[Upstream]:
    """One handshaken connection over `transport`, all of its start within the deadline."""
    limits, handlers = plan.limits, plan.handlers
    asking = Asking(plan.server, handlers, limits.max_questions)
    listing = ToolListing()
    client = Client(
        transport,
        mode=plan.mode,
        cache=None,
        read_timeout_seconds=limits.connect_timeout_s,
        elicitation_callback=asking.elicitation if handlers.elicit is not None else None,
        sampling_callback=asking.sampling if handlers.sample is not None else None,
        client_info=CLIENT_INFO,
        message_handler=_notices(listing),
    )
    with anyio.CancelScope(deadline=anyio.current_time() + limits.connect_timeout_s) as start:
        try:
            async with client, anyio.create_task_group() as watching:
                start.deadline = math.inf
                watching.start_soon(_watch_tools, client, listing, plan.server, link)
                yield Upstream(
                    client,
                    server=plan.server,
                    link=link,
                    limits=limits,
                    asking=asking,
                    listing=listing,
                    tasks=watching,
                )
                watching.cancel_scope.cancel()
                return
        except Exception as error:
            if math.isinf(start.deadline):
                raise
            single = _single(error)
            failed = _failed(plan.spec, plan.server, link, launch, single)
            if isinstance(single, MCPError) and link.alive:
                raise _Refused(failed) from None
            raise failed from None
    raise UpstreamUnreachable(
        f"the MCP server {plan.server} {_what(plan.spec)} did not complete its handshake "
        f"within {limits.connect_timeout_s:g} s: check that it starts quickly and speaks MCP"
    )


@asynccontextmanager
async def _opened(plan: _Plan) -> AsyncIterator[Upstream]:
    spec = plan.spec
    if spec.transport == "stdio":
        link = Link()
        async with launching(spec, plan.values) as launch:
            streams = stdio_streams(launch, plan.limits, link)
            try:
                async with _connected(plan, streams, link, launch) as upstream:
                    yield upstream
            except _Refused as refused:
                raise refused.error from None
        return
    for which in HTTP_TRANSPORTS:
        link = Link()
        transport = http_transport(
            spec, values=plan.values, egress=plan.egress, limits=plan.limits, link=link, which=which
        )
        entered = False
        try:
            async with _connected(plan, transport, link, None) as upstream:
                entered = True
                yield upstream
                return
        except _Refused as refused:
            if entered or which == HTTP_TRANSPORTS[-1]:
                raise refused.error from None


@asynccontextmanager
async def open_upstream(
    spec: McpServerSpec,
    *,
    server: str,
    values: Mapping[str, str],
    handlers: UpstreamHandlers = NO_HANDLERS,
    prefer_protocol: str = "",
    egress: EgressRoute | None = None,
    limits: UpstreamLimits = DEFAULT_LIMITS,
) -> AsyncIterator[Upstream]:
    """A handshaken connection to the server `spec` describes, closed (killed) on exit.

    `prefer_protocol` is the version it spoke at its review: a handshake-era one is greeted
    with `initialize` straight away. An error raised in the block comes out as itself, not
    in the exception groups of the task groups it crossed.

    Raises:
        UpstreamUnreachable: it could not be started, reached or greeted in time.
        NotImplementedYet: a bwrap sandbox network other than none or host.
    """
    mode = "legacy" if prefer_protocol in HANDSHAKE_PROTOCOL_VERSIONS else "auto"
    plan = _Plan(spec, server, values, handlers, mode, egress, limits)
    try:
        async with _opened(plan) as upstream:
            yield upstream
    except BaseExceptionGroup as group:
        single = _single(group)
        if isinstance(single, BaseExceptionGroup):
            raise
        raise single from None
