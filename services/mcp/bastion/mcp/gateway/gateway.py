"""The mcp service's upstream endpoints: servers added, reviewed and pinned; tools offered to
sessions and called, each checked against its pin on the live connection first, against a
listing started when the orchestrator said the call was coming (`prefetch`).
"""

from __future__ import annotations

import functools
import logging
import secrets
import shlex
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec
import pydantic
from mcp import types
from opentelemetry.trace import SpanKind

from bastion.mcp.gateway.canonical import tool_digest
from bastion.mcp.gateway.pins import accepted_pins, offer, review
from bastion.mcp.gateway.pool import UpstreamPool
from bastion.mcp.gateway.registry import Registry
from bastion.mcp.gateway.rendering import (
    MAX_RESULT_CHARS,
    bounded,
    prompts_text,
    read_text,
    resources_text,
    result_text,
)
from bastion.mcp.gateway.signing import (
    SignatureCheck,
    check_key_pin,
    key_fingerprint,
    load_public_key,
)
from bastion.mcp.gateway.upstream import (
    Ahead,
    SampleHandler,
    Upstream,
    UpstreamHandlers,
    grant_for,
    is_loopback_url,
    open_upstream,
)
from bastion.mcp.gateway.values import ValueSource
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.mcp import (
    AddServer,
    BrowseServer,
    BrowseText,
    ElicitAnswer,
    ElicitQuestion,
    ListServers,
    McpCall,
    McpCallResult,
    McpPrefetch,
    McpReview,
    McpServerRecord,
    McpServerSpec,
    OfferedTool,
    OfferTools,
    RemoveServer,
    ReviewServer,
    SampleAnswer,
    SampleQuestion,
    SamplingAllowance,
    ServerList,
    ServerRemoved,
    ServerSummary,
    ToolOffer,
)
from bastion.shared.bus import Client, request
from bastion.shared.cancelling import Running
from bastion.shared.dirchecks import (
    check_apart_from_state,
    check_not_showing_state,
    check_skills_apart,
)
from bastion.shared.errors import BastionError, InvalidInput, Timeout, Unavailable
from bastion.shared.secretcuts import SecretCuts
from bastion.shared.service import RequestContext
from bastion.shared.telemetry import span

__all__ = ["Gateway", "ToolChanged", "runs_sentence"]

logger = logging.getLogger(__name__)


MAX_AHEAD: Final = 4096
"""Listings started ahead of calls (and calls already made) kept at most; past it the
oldest is forgotten (its call, if it comes, lists for itself)."""
_MADE: Final = None
"""In place of a listing ahead of a call: the call was made, so a late prefetch of the same
call id starts nothing (a call is never checked against a listing from before it)."""


class ToolChanged(BastionError):
    """The tool is not what the session was offered any more: the call was not made."""

    code = codes.TOOL_CHANGED


def runs_sentence(spec: McpServerSpec) -> str:
    """How a server runs, as `list` and a review say it."""
    if spec.transport == "http":
        return f"{spec.url} over HTTP, through the egress service"
    command = shlex.join(spec.command)
    if spec.sandbox == "none":
        return f"{command}, unsandboxed, as the mcp service's own user (the operator's choice)"
    network = "no network" if spec.sandbox_network == "none" else f"network {spec.sandbox_network}"
    where = "bwrap" if spec.sandbox == "bwrap" else spec.sandbox.removeprefix("docker:")
    return f"{command}, in {where} with {network}"


def _check_spec(name: str, spec: McpServerSpec) -> None:
    if spec.transport == "stdio" and not spec.command:
        raise InvalidInput(f"MCP server {name} needs a command: `bastion mcp add {name} -- CMD`")
    if spec.transport == "http" and not spec.url:
        raise InvalidInput(f"MCP server {name} needs a URL: `bastion mcp add {name} --url URL`")
    if spec.transport == "http" and (spec.command or spec.directory or spec.env):
        raise InvalidInput(
            f"MCP server {name} is reached over HTTP: a command, --dir and --env are for "
            "servers this machine starts"
        )


def _check_dirs(spec: McpServerSpec, state: str) -> None:
    """A server's `--dir` and `--sandbox-read` pass the checks of a session's workspace and
    read-only directories: none is, holds or lies inside the state dir (`state`)."""
    state_dir = Path(state).expanduser()
    if spec.directory is not None:
        resolved = Path(spec.directory).expanduser().resolve()
        check_apart_from_state(
            "the MCP server's directory",
            spec.directory,
            resolved,
            state_dir,
            "give the server a directory apart from it",
        )
    for given in spec.read_only_dirs:
        resolved = Path(given).expanduser().resolve()
        check_not_showing_state("the read-only directory", given, resolved, state_dir)


def _check_skills(name: str, spec: McpServerSpec, skills_dir: str) -> None:
    """A session's skills dir is apart from the server's directory (the server could
    change a skill unchecked, as a command could in the workspace) and its read-only ones
    (the skills are read through the sandbox service alone)."""
    if not skills_dir:
        return
    if spec.directory is not None:
        check_skills_apart(
            skills_dir,
            f"the directory of MCP server {name}",
            Path(spec.directory).expanduser().resolve(),
            "the server could change a skill unchecked",
        )
    for given in spec.read_only_dirs:
        check_skills_apart(
            skills_dir,
            f"a read-only directory of MCP server {name}",
            Path(given).expanduser().resolve(),
            "the server would be shown the skills, which only the sandbox service reads",
        )


def _verifier(record_fingerprint: str, spec: McpServerSpec) -> SignatureCheck | None:
    """The signature check of a server given a key, its key checked against the pin."""
    if spec.public_key_pem is None:
        return None
    return _pinned_check(record_fingerprint, spec.public_key_pem)


@functools.lru_cache(maxsize=256)
def _pinned_check(record_fingerprint: str, public_key_pem: str) -> SignatureCheck:
    """The check of one key, loaded and checked against its pin once, not at every call
    (a key that does not match its pin raises, and is not kept)."""
    key = load_public_key(public_key_pem)
    if record_fingerprint:
        check_key_pin(record_fingerprint, key)
    return SignatureCheck(key)


class Gateway:
    """The endpoints' handlers."""

    def __init__(
        self,
        client: Client,
        registry: Registry,
        pool: UpstreamPool,
        values: ValueSource,
        *,
        elicit_timeout_s: float,
        grant_ttl_s: float,
        state_dir: str,
        pin_recheck_s: float,
    ) -> None:
        self._client = client
        self._registry = registry
        self._pool = pool
        self._values = values
        self._elicit_timeout_s = elicit_timeout_s
        self._grant_ttl_s = grant_ttl_s
        self._state_dir = state_dir
        self._pin_recheck_s = pin_recheck_s
        self._can_ask: dict[str, bool] = {}
        self._samples: dict[tuple[str, str], int] = {}
        """Completions each server has had in each session (its own allowance)."""
        self._given: dict[tuple[str, str, str], tuple[tuple[str, str], ...]] = {}
        """The values each connection was given: cut out of what its server answers, with
        every value of the tenant's (`SecretCuts`)."""
        self._cuts = SecretCuts(values.leases)
        self.running = Running()
        """The upstream calls running here by session and call id: what `calls.cancel` stops."""
        self._ahead: OrderedDict[tuple[str, str], tuple[Upstream, Ahead] | None] = OrderedDict()
        """By (session, call id): the listing started for a call on its way, on its
        connection; `_MADE` once that call was made."""

    def _sampler(
        self, server: str, allowance: SamplingAllowance | None, session_id: str
    ) -> SampleHandler | None:
        """Sampling for a server the operator allowed it, within the allowance: relayed to
        whoever answers for the session, `max_tokens` capped, none of its context given."""
        if allowance is None or not session_id:
            return None

        async def sample(
            params: types.CreateMessageRequestParams,
        ) -> types.CreateMessageResult | types.ErrorData:
            used = self._samples.get((session_id, server), 0)
            if used >= allowance.per_session:
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message=f"MCP server {server} has had its {allowance.per_session} "
                    "completions for this session",
                )
            self._samples[(session_id, server)] = used + 1
            bounded = params.model_copy(
                update={
                    "max_tokens": min(params.max_tokens, allowance.max_tokens),
                    "include_context": None,
                }
            )
            question = SampleQuestion(
                session_id=session_id,
                server=server,
                request_json=bounded.model_dump_json(by_alias=True, exclude_none=True),
            )
            try:
                answer: SampleAnswer = await request(
                    self._client,
                    subjects.mcp_sample(session_id),
                    question,
                    SampleAnswer,
                    timeout_s=self._elicit_timeout_s,
                )
            except Unavailable:
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message="no one can complete a message for this session now",
                )
            if answer.refused or not answer.result_json:
                why = answer.refused[:300] or "the completion was not given"
                return types.ErrorData(code=types.INVALID_REQUEST, message=why)
            try:
                return types.CreateMessageResult.model_validate_json(answer.result_json)
            except pydantic.ValidationError:
                return types.ErrorData(
                    code=types.INTERNAL_ERROR, message="the completion relayed was not one"
                )

        return sample

    def _handlers(self, server: str, spec: McpServerSpec, session_id: str) -> UpstreamHandlers:
        async def elicit(question: ElicitQuestion) -> ElicitAnswer:
            try:
                answer: ElicitAnswer = await request(
                    self._client,
                    subjects.mcp_elicit(session_id),
                    question,
                    ElicitAnswer,
                    timeout_s=self._elicit_timeout_s,
                )
            except Timeout:
                return ElicitAnswer(action="cancel")
            except Unavailable:
                return ElicitAnswer(action="decline")  # nobody answers for the session now
            return answer

        # Elicitation is declared to the server only when a client answers for the session.
        return UpstreamHandlers(
            elicit=elicit if self._can_ask.get(session_id, False) else None,
            sample=self._sampler(server, spec.sampling, session_id),
            session_id=session_id,
        )

    @asynccontextmanager
    async def _connect(
        self, tenant: str, name: str, spec: McpServerSpec, protocol: str = "", session_id: str = ""
    ) -> AsyncIterator[Upstream]:
        values = await self._values.values(tenant, name, spec, session_id)
        self._given[(tenant, name, session_id)] = tuple(sorted(values.items()))
        route = None
        if spec.url is not None and not is_loopback_url(spec.url):
            route = await grant_for(
                self._client,
                spec.url,
                session_id=session_id or secrets.token_hex(8),
                tenant=tenant,
                ttl_s=self._grant_ttl_s,
            )
        async with open_upstream(
            spec,
            server=name,
            values=values,
            handlers=self._handlers(name, spec, session_id),
            prefer_protocol=protocol,
            egress=route,
        ) as upstream:
            yield upstream

    async def _session_upstream(self, record: McpServerRecord, session_id: str) -> Upstream:
        return await self._pool.get(
            (record.tenant, record.name, session_id),
            lambda: self._connect(
                record.tenant, record.name, record.spec, record.protocol, session_id
            ),
        )

    def _review(
        self, record: McpServerRecord, upstream: Upstream, live: list[types.Tool], pinned: bool
    ) -> McpReview:
        verifier = _verifier(record.key_fingerprint, record.spec)
        return McpReview(
            server=record.name,
            server_name=upstream.server_name,
            server_version=upstream.server_version,
            protocol=upstream.protocol,
            runs=runs_sentence(record.spec),
            tools=tuple(
                review(live, record.pins, record.spec.effects, verifier, server=record.name)
            ),
            pinned=pinned,
        )

    def _pinned(
        self, record: McpServerRecord, upstream: Upstream, live: list[types.Tool]
    ) -> McpServerRecord:
        """The record with the live tools as its pins (those a review does not refuse)."""
        verifier = _verifier(record.key_fingerprint, record.spec)
        return msgspec.structs.replace(
            record,
            reviewed_at=datetime.now(UTC),
            server_name=upstream.server_name,
            server_version=upstream.server_version,
            protocol=upstream.protocol,
            pins=accepted_pins(live, record.spec.effects, verifier, server=record.name),
        )

    async def add(self, ask: AddServer, _context: RequestContext) -> McpReview:
        _check_spec(ask.name, ask.spec)
        _check_dirs(ask.spec, self._state_dir)
        fingerprint = ""
        if ask.spec.public_key_pem is not None:
            fingerprint = key_fingerprint(load_public_key(ask.spec.public_key_pem))
        now = datetime.now(UTC)
        record = McpServerRecord(
            tenant=ask.tenant,
            name=ask.name,
            spec=ask.spec,
            added_at=now,
            reviewed_at=now,
            key_fingerprint=fingerprint,
        )
        async with self._connect(ask.tenant, ask.name, ask.spec) as upstream:
            live = await upstream.list_tools()
            shown = self._review(record, upstream, live, pinned=True)
            await self._registry.add(self._pinned(record, upstream, live))
        return shown

    async def review(self, ask: ReviewServer, _context: RequestContext) -> McpReview:
        record, revision = await self._registry.get(ask.tenant, ask.name)
        async with self._connect(ask.tenant, ask.name, record.spec, record.protocol) as upstream:
            live = await upstream.list_tools()
            shown = self._review(record, upstream, live, pinned=ask.accept)
            if ask.accept:
                await self._registry.replace(self._pinned(record, upstream, live), revision)
        if ask.accept:
            self._pool.close_server(ask.tenant, ask.name)
        return shown

    async def list(self, ask: ListServers, _context: RequestContext) -> ServerList:
        records = await self._registry.of_tenant(ask.tenant)
        return ServerList(
            tenant=ask.tenant,
            servers=tuple(
                ServerSummary(name=r.name, runs=runs_sentence(r.spec), pins=r.pins) for r in records
            ),
        )

    async def remove(self, ask: RemoveServer, _context: RequestContext) -> ServerRemoved:
        await self._registry.remove(ask.tenant, ask.name)
        self._pool.close_server(ask.tenant, ask.name)
        return ServerRemoved(name=ask.name)

    async def check_offerable(self, tenant: str, servers: tuple[str, ...], skills_dir: str) -> None:
        """Refuse a server `offer` would withhold before starting it: one the tenant has
        not added, or whose directories `skills_dir` overlaps. Nothing is started.

        Raises:
            BastionError: the first refusal, said as a session's notice says it.
        """
        for name in dict.fromkeys(servers):
            try:
                record = await self._registry.current(tenant, name)
                _check_skills(name, record.spec, skills_dir)
            except BastionError as error:
                error.message = f"MCP server {name} is not offered: {error.message}"
                error.args = (error.message,)
                raise

    async def offer(self, ask: OfferTools, _context: RequestContext) -> ToolOffer:
        tools: list[OfferedTool] = []
        notices: list[str] = []
        self._can_ask[ask.session_id] = ask.can_ask
        for name in dict.fromkeys(ask.servers):
            try:
                record = await self._registry.current(ask.tenant, name)
                _check_skills(name, record.spec, ask.skills_dir)
                verifier = _verifier(record.key_fingerprint, record.spec)
                upstream = await self._session_upstream(record, ask.session_id)
                live = await upstream.list_tools()
            except BastionError as error:
                said = await self._redacted(ask.tenant, name, ask.session_id, error.message)
                notices.append(f"MCP server {name} is not offered: {said}")
                continue
            offered, withheld = offer(
                live, record.pins, record.spec.effects, verifier, name, with_resources=True
            )
            tools.extend(
                msgspec.structs.replace(t, call_timeout_s=record.spec.timeout_s) for t in offered
            )
            notices.extend(withheld)
        return ToolOffer(tools=tuple(tools), notices=tuple(notices))

    def prefetch(self, ask: McpPrefetch) -> None:
        """A call of a tool of `ask.server` is on its way: on the session's connection, if
        one is open here, start the listing that call's pin check will await. Nothing is
        opened: a new connection lists for its first call anyway. A call id already made, or
        a kept listing the operator lets stand, starts nothing."""
        key = (ask.session_id, ask.call_id)
        upstream = self._pool.live((ask.tenant, ask.server, ask.session_id))
        if upstream is None or upstream.keeps_fresh(self._pin_recheck_s):
            return
        if key in self._ahead and self._ahead[key] is _MADE:
            return
        self._ahead[key] = (upstream, upstream.list_ahead())
        self._ahead.move_to_end(key)
        while len(self._ahead) > MAX_AHEAD:
            self._ahead.popitem(last=False)

    def _listed_ahead(self, ask: McpCall, upstream: Upstream) -> Ahead | None:
        """The listing started for this call on this connection, if any; the call id is
        marked made from now on."""
        key = (ask.session_id, ask.call_id)
        ahead = self._ahead.pop(key, None)
        self._ahead[key] = _MADE
        while len(self._ahead) > MAX_AHEAD:
            self._ahead.popitem(last=False)
        if ahead is None or ahead[0] is not upstream:
            return None
        return ahead[1]

    async def call(self, ask: McpCall, _context: RequestContext) -> McpCallResult:
        """The upstream tool's answer; a cancel of the call cancels the upstream request
        (the SDK then sends the server `notifications/cancelled`)."""
        try:
            with self.running.scope(ask.session_id, ask.call_id) as running:
                return await self._call(ask)
            raise running.error(f"this call of MCP server {ask.server}")
        except BastionError as error:
            error.message = await self._redacted(
                ask.tenant, ask.server, ask.session_id, error.message
            )
            error.args = (error.message,)
            raise

    async def _call(self, ask: McpCall) -> McpCallResult:
        record = await self._registry.current(ask.tenant, ask.server)
        self._can_ask[ask.session_id] = ask.can_ask
        upstream = await self._session_upstream(record, ask.session_id)
        if ask.upstream_kind == "resources":
            resources, templates = await upstream.list_resources()
            listed = resources_text(resources, templates, ask.server)
            return McpCallResult(
                text=await self._redacted(ask.tenant, ask.server, ask.session_id, listed)
            )
        if ask.upstream_kind == "read_resource":
            uri = ask.arguments.get("uri")
            if not isinstance(uri, str) or not uri or len(uri) > 8192:
                raise InvalidInput(
                    f'{ask.server}_read_resource takes {{"uri": "..."}}: one of those '
                    f"{ask.server}_resources lists"
                )
            read = read_text(await upstream.read_resource(uri))
            return McpCallResult(
                text=await self._redacted(ask.tenant, ask.server, ask.session_id, read)
            )
        with span("mcp.pin_check", server=ask.server, tool=ask.tool):
            await self._check_pin(record, upstream, ask, self._listed_ahead(ask, upstream))
        with span("mcp.upstream.call", SpanKind.CLIENT, server=ask.server, tool=ask.tool):
            result = await upstream.call_tool(ask.tool, ask.arguments, record.spec.timeout_s)
        return McpCallResult(
            text=await self._redacted(ask.tenant, ask.server, ask.session_id, result_text(result)),
            is_error=bool(result.is_error),
        )

    async def _check_pin(
        self, record: McpServerRecord, upstream: Upstream, ask: McpCall, ahead: Ahead | None
    ) -> None:
        """The tool as the server lists it must be the one the session was offered: in a
        listing asked for after the call was made (`ahead`, or one asked for now), unless
        the operator lets a kept one stand for `pin_recheck_s` (`docs/upstream-mcp.md`,
        "The call-time check")."""
        tool = await upstream.tool_for_call(ask.tool, self._pin_recheck_s, ahead)
        review_hint = f"(`bastion mcp review {ask.server}`)"
        if tool is None:
            raise ToolChanged(
                f"MCP server {ask.server} no longer offers {ask.tool}, so the call was not "
                f"made {review_hint}"
            )
        if tool_digest(tool) != ask.digest:
            raise ToolChanged(
                f"MCP server {ask.server} changed {ask.tool} since this session was offered "
                f"it, so the call was not made: it is offered again once reviewed {review_hint}"
            )
        verifier = _verifier(record.key_fingerprint, record.spec)
        if verifier is not None:
            why = verifier.check(tool)
            if why:
                raise ToolChanged(
                    f"MCP server {ask.server}: {ask.tool} is not signed by its pinned key "
                    f"({why}), so the call was not made"
                )

    async def browse(self, ask: BrowseServer, _context: RequestContext) -> BrowseText:
        """A server's prompts, resources or one resource, as the operator asked, with the
        tenant's values cut out like a session's answers."""
        shown = await self._browse(ask)
        return BrowseText(text=await self._redacted(ask.tenant, ask.name, "", shown.text))

    async def _browse(self, ask: BrowseServer) -> BrowseText:
        record, _ = await self._registry.get(ask.tenant, ask.name)
        async with self._connect(ask.tenant, ask.name, record.spec, record.protocol) as upstream:
            if ask.what == "prompts":
                return BrowseText(text=prompts_text(await upstream.list_prompts(), ask.name))
            if ask.what == "read":
                if not ask.uri:
                    raise InvalidInput(
                        f"give the resource to read: `bastion mcp resources read {ask.name} URI`"
                    )
                return BrowseText(text=read_text(await upstream.read_resource(ask.uri)))
            resources, templates = await upstream.list_resources()
            return BrowseText(text=resources_text(resources, templates, ask.name))

    async def _redacted(self, tenant: str, server: str, session_id: str, text: str) -> str:
        """`text` with the values the server was given cut out, and every value of the
        tenant's: a server that echoes its token (an error page quoting a header), or reads
        a file a command of the tenant wrote a value into, never shows it to the model. A
        large text is cut in a worker thread, in the tenant's turn. Cut first, then cut
        short to `MAX_RESULT_CHARS` (`rendering.bounded`)."""
        given = self._given.get((tenant, server, session_id), ())
        cutter = await self._cuts.cutter(tenant, session_id or secrets.token_hex(8), given)
        size = min(len(text), 2 * MAX_RESULT_CHARS)
        return await cutter.run(size, lambda: bounded(text, cutter.redactor))

    def session_closed(self, session_id: str) -> None:
        self._can_ask.pop(session_id, None)
        for counted in [k for k in self._samples if k[0] == session_id]:
            del self._samples[counted]
        for key in [k for k in self._given if k[2] == session_id]:
            del self._given[key]
        for made in [k for k in self._ahead if k[0] == session_id]:
            del self._ahead[made]
        self._pool.close_session(session_id)
