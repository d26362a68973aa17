"""One live connection to an upstream server: listing and calling, every answer bounded.

Everything goes through the SDK's `ClientSession`, never `Client`'s own helpers: `Client`
caches listings by the server's own `ttlMs` and re-lists and retries a call on `-32020`, and
a gateway that checks pins must decide itself how fresh a listing is and fail closed. The
call-time check, `tool_for_call`, takes a listing started for the call ahead of it
(`list_ahead`) or asked for then (`ToolListing`, `Ahead`). A call that gets no answer breaks
the connection (the process is killed): it may have taken effect, and is never retried.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeVar

import anyio
from anyio.abc import TaskGroup
from mcp import Client, types
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from bastion.mcp.gateway.upstream.errors import (
    UpstreamNoAnswer,
    UpstreamRefused,
    UpstreamUnreachable,
)
from bastion.mcp.gateway.upstream.handlers import Asking
from bastion.mcp.gateway.upstream.limits import UpstreamLimits
from bastion.mcp.gateway.upstream.link import Link
from bastion.mcp.gateway.upstream.listing import Ahead, Asked, ToolListing

__all__ = ["LIST_TIMEOUT_S", "Upstream"]

logger = logging.getLogger(__name__)

LIST_TIMEOUT_S: Final = 30.0
"""How long one page of a listing, a resource read or a prompt list may take."""

_T = TypeVar("_T")
_Page = TypeVar("_Page", bound=types.PaginatedResult)
_CONNECTION_CLOSED: Final = types.CONNECTION_CLOSED
_REQUEST_TIMEOUT: Final = types.REQUEST_TIMEOUT
_SILENT: Final = "did not answer"


class Upstream:
    """A handshaken connection to one upstream server, for the length of `open_upstream`."""

    def __init__(
        self,
        client: Client,
        *,
        server: str,
        link: Link,
        limits: UpstreamLimits,
        asking: Asking,
        listing: ToolListing,
        tasks: TaskGroup,
    ) -> None:
        self._client = client
        self._listing = listing
        self._tasks = tasks
        self._session = client.session
        self._server = server
        self._link = link
        self._limits = limits
        self._asking = asking
        info = client.server_info
        self.server_name: str = info.name if info is not None else ""
        self.server_version: str = info.version if info is not None else ""
        self.protocol: str = client.protocol_version

    @property
    def alive(self) -> bool:
        """False once a request got no answer or the server went away: open a new one."""
        return self._link.alive

    def _no_answer(self, doing: str, reason: str, *, call: bool) -> UpstreamNoAnswer:
        tail = "the call may or may not have taken effect" if call else "connect to it again"
        if reason.startswith(_SILENT):
            # "did not answer within 5 s" reads "did not answer add_note within 5 s".
            happened = f"{_SILENT} {doing}{reason.removeprefix(_SILENT)}"
        else:
            happened = f"{reason} before answering {doing}"
        return UpstreamNoAnswer(f"the MCP server {self._server} {happened}: {tail}")

    async def _ask(
        self, doing: str, timeout_s: float, request: Callable[[], Awaitable[_T]], *, call: bool
    ) -> _T:
        """`request()` within `timeout_s`, its failures as the errors of this package."""
        if not self._link.alive:
            raise UpstreamUnreachable(
                f"the MCP server {self._server} is no longer connected (it "
                f"{self._link.reason}): {doing} was not sent; connect to it again"
            )
        try:
            with anyio.fail_after(timeout_s):
                return await request()
        except TimeoutError:
            self._link.break_with(f"{_SILENT} within {timeout_s:g} s")
        except MCPError as error:
            if error.code == _REQUEST_TIMEOUT:
                self._link.break_with(f"{_SILENT} within {timeout_s:g} s")
            elif self._link.alive and error.code != _CONNECTION_CLOSED:
                raise UpstreamRefused(self._server, doing, error.code, error.message) from None
            self._link.break_with("closed the connection")
        except RuntimeError:
            # The SDK checked a result against the tool's output schema, and it failed.
            raise UpstreamRefused(
                self._server,
                doing,
                types.INTERNAL_ERROR,
                "its answer does not match its own schema",
            ) from None
        except (ValidationError, ValueError):
            self._link.break_with("sent an answer that is not valid MCP")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self._link.break_with("closed the connection")
        raise self._no_answer(doing, self._link.reason or "went away", call=call)

    async def _pages(
        self,
        what: str,
        fetch: Callable[[types.PaginatedRequestParams | None], Awaitable[_Page]],
        of: Callable[[_Page], list[_T]],
    ) -> list[_T]:
        """Every page of a listing (`of` each page its items), at most `max_tools` items
        and `max_pages` pages."""
        items: list[_T] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(self._limits.max_pages):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            listed = await self._ask(what, LIST_TIMEOUT_S, partial(fetch, params), call=False)
            page, cursor = of(listed), listed.next_cursor
            room = self._limits.max_tools - len(items)
            items += page[:room]
            if len(page) > room or (cursor is not None and len(items) == self._limits.max_tools):
                logger.warning(
                    "MCP server %s lists over %d in %s: cut", self._server, len(items), what
                )
                return items
            if cursor is None or cursor in seen:
                return items
            seen.add(cursor)
        logger.warning(
            "MCP server %s lists over %d pages: cut", self._server, self._limits.max_pages
        )
        return items

    async def list_tools(self) -> list[types.Tool]:
        """Every tool it lists now (asked for, never taken from a cache), at most `max_tools`;
        kept for `tool_for_call`."""
        return await self._listed(self._listing.asking())

    async def _listed(self, asked: Asked) -> list[types.Tool]:
        tools = await self._pages(
            "tools/list", lambda params: self._session.list_tools(params=params), lambda r: r.tools
        )
        self._listing.keep(tools, asked)
        return tools

    def list_ahead(self) -> Ahead:
        """Start listing the tools now, for a call on its way: its check (`tool_for_call`)
        awaits this listing instead of asking for one then. The listing runs in the
        connection's own tasks, ended with it."""
        ahead = Ahead(self._listing.asking())
        self._tasks.start_soon(self._fill, ahead)
        return ahead

    async def _fill(self, ahead: Ahead) -> None:
        try:
            ahead.tools = {tool.name: tool for tool in await self._listed(ahead.asked)}
        except Exception:  # the call then lists for itself, and says what went wrong
            ahead.tools = None
        finally:
            ahead.done.set()

    def keeps_fresh(self, max_age_s: float) -> bool:
        """The kept listing stands for the next call (`ToolListing.fresh`): none is needed ahead."""
        return self._listing.fresh(max_age_s)

    async def tool_for_call(
        self, name: str, max_age_s: float, ahead: Ahead | None = None
    ) -> types.Tool | None:
        """The tool `name` as the server lists it (None when it does not), from a listing
        asked for after the call was made: `ahead`, started for this call, unless it failed
        or a change notice came since it was asked for; else one asked for now. With
        `max_age_s` > 0 the kept listing stands instead while it is that fresh and no notice
        came since (`docs/upstream-mcp.md`, "The call-time check")."""
        if self._listing.fresh(max_age_s):
            return self._listing.tools.get(name)
        if ahead is not None:
            await ahead.done.wait()
            if ahead.tools is not None and self._listing.unchanged_since(ahead.asked):
                return ahead.tools.get(name)
        tools = await self.list_tools()
        return next((tool for tool in tools if tool.name == name), None)

    async def list_resources(self) -> tuple[list[types.Resource], list[types.ResourceTemplate]]:
        """Its resources and resource templates, at most `max_tools` of each."""
        listed = await self._pages(
            "resources/list",
            lambda params: self._session.list_resources(params=params),
            lambda r: r.resources,
        )
        return listed, await self._pages(
            "resources/templates/list",
            lambda params: self._session.list_resource_templates(params=params),
            lambda r: r.resource_templates,
        )

    async def list_prompts(self) -> list[types.Prompt]:
        """Its prompts, at most `max_tools`."""
        return await self._pages(
            "prompts/list",
            lambda params: self._session.list_prompts(params=params),
            lambda r: r.prompts,
        )

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """One resource's contents."""

        async def read() -> types.ReadResourceResult:
            return await self._session.read_resource(uri)

        return await self._ask(f"resources/read of {uri[:200]}", LIST_TIMEOUT_S, read, call=False)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], timeout_s: float
    ) -> types.CallToolResult:
        """Call one tool once, through the session (no re-list, no retry), within `timeout_s`.

        Raises:
            UpstreamNoAnswer: no answer in time, or the server went away or sent nonsense.
            UpstreamRefused: it answered with a JSON-RPC error.
            UpstreamUnreachable: the connection was already lost; the call was not sent.
        """
        self._asking.new_call()

        async def call() -> types.CallToolResult:
            result = await self._session.call_tool(
                name, arguments, read_timeout_seconds=timeout_s, allow_input_required=True
            )
            for _ in range(self._limits.max_questions + 1):
                if not isinstance(result, types.InputRequiredResult):
                    return result
                responses = await self._answer(result)
                result = await self._session.call_tool(
                    name,
                    arguments,
                    input_responses=responses,
                    request_state=result.request_state,
                    allow_input_required=True,
                )
            if isinstance(result, types.InputRequiredResult):
                raise MCPError(
                    types.INVALID_REQUEST, "it kept asking for input past the questions allowed"
                )
            return result

        return await self._ask(name, timeout_s, call, call=True)

    async def _answer(self, asked: types.InputRequiredResult) -> types.InputResponses | None:
        """Answers to a 2026-07-28 server's questions, through the same callbacks."""
        if not asked.input_requests:
            return None
        responses: types.InputResponses = {}
        for key, request in asked.input_requests.items():
            context = ClientRequestContext(session=self._session, request_id=key)
            answer = await self._session.dispatch_input_request(context, request)
            if isinstance(answer, types.ErrorData):
                raise MCPError.from_error_data(answer)
            responses[key] = answer
        return responses
