"""The front door's HTTP routes: probes, approvals and call cancels forwarded to the
orchestrator, agents' tokens (`bastion.mcp.frontdoor.httptokens`), and MCP.

Listing and answering approvals are requests to the orchestrator's `approvals.list` /
`approvals.answer` endpoints, cancelling a call one to `session.<id>.cancel`, their answers
sent back as the JSON of the same proto structs. `/mcp` is the MCP endpoint
(`bastion.mcp.frontdoor`), its session manager run in the app's lifespan.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import msgspec
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bastion.mcp.frontdoor.cancelling import send_cancel
from bastion.mcp.frontdoor.httperrors import HttpError, error_response, response_of
from bastion.mcp.frontdoor.httpguard import check_origin, label_of
from bastion.mcp.frontdoor.httpsettings import FrontDoor
from bastion.mcp.frontdoor.httptokens import token_routes
from bastion.mcp.frontdoor.server import McpEndpoint
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalAnswer, ApprovalAnswered, ApprovalList, ApprovalQuery
from bastion.shared.bus import Client, request
from bastion.shared.codec import describe_decode_error
from bastion.shared.errors import BastionError, InvalidInput, Unavailable
from bastion.shared.telemetry import context_from_headers, tracer

__all__ = ["AnswerBody", "build_app"]

logger = logging.getLogger(__name__)

LIST_TIMEOUT_S = 30.0
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")
_ROUTE_ERRORS = {
    404: (
        "not_found",
        "no such route: the API has /mcp, /v1/approvals, /v1/tokens, /v1/sessions/{session}/"
        "calls/{call_id}/cancel, /livez and /readyz",
    ),
    405: ("method_not_allowed", "this route does not take that method"),
}
_SESSION_ID = re.compile(r"[0-9a-f]{16}")
_MAX_CALL_ID = 64
_QUERY_FIELDS = {"session": "session_id", "tenant": "tenant", "all": "every_state"}


class AnswerBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of `POST /v1/approvals/{request_id}`: approve (once, or `always` with an
    optional `rule`), or decline with a `reason`."""

    approve: bool
    always: bool = False
    rule: Annotated[str, msgspec.Meta(max_length=1024)] | None = None
    reason: Annotated[str, msgspec.Meta(max_length=1024)] | None = None


_answer_decoder = msgspec.json.Decoder(AnswerBody)
_encoder = msgspec.json.Encoder()

Handler = Callable[[Request], Awaitable[Response]]


def _json(message: object) -> Response:
    return Response(_encoder.encode(message), media_type="application/json")


async def _body(request: Request, limit: int) -> bytes:
    too_big = HttpError(413, "too_large", f"the request body is over {limit} bytes: send less")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def _query(request: Request) -> ApprovalQuery:
    values: dict[str, Any] = {}
    for name, value in request.query_params.items():
        if name not in _QUERY_FIELDS:
            raise InvalidInput(
                f"unknown query parameter {name[:40]!r}: the list takes session, tenant and all"
            )
        if name == "all":
            if value.lower() not in _TRUE + _FALSE:
                raise InvalidInput("the query parameter all is true or false")
            values["every_state"] = value.lower() in _TRUE
        else:
            values[_QUERY_FIELDS[name]] = value
    try:
        return msgspec.convert(values, ApprovalQuery)
    except msgspec.ValidationError as error:
        raise InvalidInput(describe_decode_error(error, ApprovalQuery)) from None


def _answer(request_id: str, body: AnswerBody, by: str) -> ApprovalAnswer:
    if not body.approve and (body.always or body.rule):
        raise InvalidInput('"always" and "rule" go with "approve": true, not with a decline')
    if body.approve and body.reason:
        raise InvalidInput('"reason" goes with "approve": false: an approval takes none')
    if body.rule and not body.always:
        raise InvalidInput('"rule" goes with "always": true')
    try:
        return msgspec.convert(
            {
                "request_id": request_id,
                "approve": body.approve,
                "by": by,
                "always": body.always,
                "rule": body.rule or "",
                "reason": body.reason or "",
            },
            ApprovalAnswer,
        )
    except msgspec.ValidationError as error:
        if "request_id" in str(error):
            raise InvalidInput(
                "the request id in the path is not 16 lowercase hex digits: take it from "
                "GET /v1/approvals"
            ) from None
        raise InvalidInput(describe_decode_error(error, ApprovalAnswer)) from None


def _orchestrator_sentence(error: Unavailable) -> Unavailable:
    """An unavailable orchestrator, said as such (its type, so the status, kept)."""
    return type(error)(
        f"the orchestrator does not answer ({error.message}): is Bastion running? "
        "(`bastion status` says)"
    )


def _cancelling(client: Client) -> Callable[[Request, str], Awaitable[Response]]:
    """`POST /v1/sessions/{session}/calls/{call_id}/cancel`: the cancel sent by `http:<label>`;
    404 for a session or call there is none of, the answer's JSON otherwise."""

    async def cancel_call(request: Request, label: str) -> Response:
        session_id = request.path_params["session"]
        call_id = request.path_params["call_id"]
        if not _SESSION_ID.fullmatch(session_id):
            raise HttpError(404, "not_found", f"there is no session {session_id[:40]!r}")
        if not 1 <= len(call_id) <= _MAX_CALL_ID:
            raise HttpError(404, "not_found", f"there is no call {call_id[:40]!r}")
        answer = await send_cancel(client, session_id, call_id, f"http:{label}")
        if answer.outcome == "unknown":
            raise HttpError(404, "not_found", answer.message)
        logger.info(
            "call cancelled over http",
            extra={"session": session_id, "by": f"http:{label}", "outcome": answer.outcome},
        )
        return _json(answer)

    return cancel_call


def build_app(client: Client, door: FrontDoor, mcp: McpEndpoint | None = None) -> Starlette:
    """The front door's application, forwarding to the orchestrator over `client`, with the
    MCP endpoint at `/mcp` when `mcp` is given."""

    def guarded(route: str, handler: Callable[[Request, str], Awaitable[Response]]) -> Handler:
        """`handler` behind the origin check and a SERVER span `<METHOD> <route>` that
        continues the `traceparent` HTTP header, if the request has one."""

        async def run(request: Request) -> Response:
            with tracer().start_as_current_span(
                f"{request.method} {route}",
                context=context_from_headers(dict(request.headers)),
                kind=SpanKind.SERVER,
                attributes={"http.request.method": request.method, "http.route": route},
            ) as span:
                response = await answer(request)
                span.set_attribute("http.response.status_code", response.status_code)
                if response.status_code >= 500:
                    span.set_status(StatusCode.ERROR)
                return response

        async def answer(request: Request) -> Response:
            try:
                check_origin(request, door)
                return await handler(request, label_of(request, door))
            except Unavailable as error:
                return response_of(_orchestrator_sentence(error))
            except BastionError as error:
                return response_of(error)

        return run

    async def list_approvals(request: Request, _label: str) -> Response:
        found: ApprovalList = await request_(
            subjects.APPROVALS_LIST, _query(request), ApprovalList, LIST_TIMEOUT_S
        )
        return _json(found)

    async def answer_approval(request: Request, label: str) -> Response:
        raw = await _body(request, door.max_body_bytes)
        try:
            body = _answer_decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise HttpError(400, "bad_request", describe_decode_error(error, AnswerBody)) from None
        answer = _answer(request.path_params["request_id"], body, f"http:{label}")
        answered: ApprovalAnswered = await request_(
            subjects.APPROVALS_ANSWER, answer, ApprovalAnswered, door.answer_timeout_s
        )
        logger.info(
            "approval answered over http",
            extra={"request_id": answer.request_id, "by": answer.by, "approve": answer.approve},
        )
        return _json(answered)

    async def request_(subject: str, message: object, reply: Any, timeout_s: float) -> Any:
        return await request(client, subject, message, reply, timeout_s=timeout_s)

    async def livez(_request: Request) -> Response:
        return Response("ok\n", media_type="text/plain")

    async def readyz(_request: Request) -> Response:
        if not client.is_connected:
            return error_response(503, "unavailable", "not connected to NATS")
        return Response("ok\n", media_type="text/plain")

    async def http_error(_request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        code, message = _ROUTE_ERRORS.get(error.status_code, ("bad_request", "refused"))
        return error_response(error.status_code, code, message)

    async def crashed(_request: Request, _error: Exception) -> Response:
        return error_response(500, "internal", "the front door failed; its log has the detail")

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if mcp is None:
            yield
            return
        async with mcp.running():
            yield

    routes = [
        Route("/livez", livez, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/v1/approvals", guarded("/v1/approvals", list_approvals), methods=["GET"]),
        Route(
            "/v1/approvals/{request_id}",
            guarded("/v1/approvals/{request_id}", answer_approval),
            methods=["POST"],
        ),
        *token_routes(guarded, client, door.max_body_bytes, _body),
        Route(
            "/v1/sessions/{session}/calls/{call_id}/cancel",
            guarded("/v1/sessions/{session}/calls/{call_id}/cancel", _cancelling(client)),
            methods=["POST"],
        ),
    ]
    if mcp is not None:
        routes.append(Route("/mcp", mcp.app, methods=["GET", "POST", "DELETE"]))
    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: crashed},
        lifespan=lifespan,
    )
