"""Serving endpoints as a NATS micro service, with every request answered and none stalling.

`nats.micro` gives discovery (`$SRV.PING|INFO|STATS`) for free but has two traps this
module closes: it answers an unhandled exception with `repr(exception)` (which may hold
secrets or input), and each subscription handles one message at a time. So a handler here
never runs inside the subscription callback: the callback hands the request to the
service's task group and returns. The work then decodes the payload (a payload of the
wrong shape gets a `bad_request` reply), opens a span from the `traceparent` header, runs
the typed handler, and answers with its result or a typed `ErrorReply`; an unexpected
exception is logged and answered with a fixed sentence.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointStats
from opentelemetry.trace import SpanKind, Status, StatusCode

from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BastionError
from bastion.shared.telemetry import context_from_headers, tracer

__all__ = ["Endpoint", "RequestContext", "Service"]

logger = logging.getLogger(__name__)

Req = TypeVar("Req")

_STATUS_OF_CODE = {
    codes.BAD_REQUEST: "400",
    codes.INVALID_INPUT: "400",
    codes.DENIED: "403",
    codes.NOT_FOUND: "404",
    codes.UNKNOWN_TOOL: "404",
    codes.CONFLICT: "409",
    codes.SESSION_CLOSED: "410",
    codes.NOT_IMPLEMENTED: "501",
    codes.UNAVAILABLE: "503",
    codes.TIMEOUT: "504",
}


@dataclass(frozen=True)
class RequestContext:
    """What a handler may know of a request besides its message."""

    subject: str
    headers: Mapping[str, str]


Handler = Callable[[Req, RequestContext], Awaitable[object]]


@dataclass
class Endpoint(Generic[Req]):
    """One endpoint: a subject, the message it takes, the handler, and its counters."""

    name: str
    subject: str
    request_type: Any
    handler: Handler[Req]
    requests: int = 0
    errors: int = 0
    last_error: str = ""
    processing_ns: int = 0
    in_flight: int = field(default=0)


class Service:
    """A Bastion service: a name, a version, and typed endpoints served on one connection."""

    def __init__(self, name: str, version: str, description: str = "") -> None:
        self.name = name
        self.version = version
        self.description = description
        self.endpoints: dict[str, Endpoint[Any]] = {}
        self._idle = anyio.Event()
        self._in_flight = 0
        self.instance_id = ""

    def add_endpoint(
        self, name: str, subject: str, request_type: Any, handler: Handler[Req]
    ) -> None:
        """Serve `handler` on `subject`; it takes a decoded `request_type` and returns a message."""
        self.endpoints[name] = Endpoint(name, subject, request_type, handler)

    @asynccontextmanager
    async def running(self, client: Client, drain_timeout_s: float = 30.0) -> AsyncIterator[None]:
        """Serve until the block exits; then stop taking requests and finish those in flight.

        Work still running after `drain_timeout_s` is cancelled.
        """
        async with anyio.create_task_group() as work:
            micro = await add_service(
                client,
                name=self.name,
                version=self.version,
                description=self.description,
                metadata={"host": socket.gethostname(), "pid": str(os.getpid())},
                stats_handler=self._fill_stats,
            )
            self.instance_id = micro.id
            for endpoint in self.endpoints.values():
                await micro.add_endpoint(
                    name=endpoint.name,
                    subject=endpoint.subject,
                    handler=self._dispatcher(endpoint, work),
                )
            await client.flush()
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await micro.stop()
                    with anyio.move_on_after(drain_timeout_s):
                        while self._in_flight:
                            await self._idle.wait()
                    work.cancel_scope.cancel()

    def _dispatcher(
        self, endpoint: Endpoint[Any], work: TaskGroup
    ) -> Callable[[Request], Awaitable[None]]:
        async def dispatch(request: Request) -> None:
            self._in_flight += 1
            endpoint.in_flight += 1
            if self._idle.is_set():
                self._idle = anyio.Event()
            work.start_soon(self._answer, endpoint, request)

        return dispatch

    async def _answer(self, endpoint: Endpoint[Any], request: Request) -> None:
        started = time.perf_counter_ns()
        headers = request.headers or {}
        try:
            with tracer().start_as_current_span(
                f"process {endpoint.subject}",
                context=context_from_headers(headers),
                kind=SpanKind.SERVER,
                attributes={
                    "messaging.system": "nats",
                    "messaging.destination.name": endpoint.subject,
                    "bastion.service": self.name,
                },
            ) as span:
                reply, error = await self._run_handler(endpoint, request, headers)
                if error is not None:
                    span.set_status(Status(StatusCode.ERROR, error.code))
                    span.set_attribute("error.type", error.code)
                await self._respond(request, reply, error)
        finally:
            endpoint.requests += 1
            endpoint.processing_ns += time.perf_counter_ns() - started
            endpoint.in_flight -= 1
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    async def _run_handler(
        self, endpoint: Endpoint[Any], request: Request, headers: Mapping[str, str]
    ) -> tuple[object, ErrorReply | None]:
        try:
            message = decode(request.data, endpoint.request_type)
            result = await endpoint.handler(message, RequestContext(request.subject, headers))
        except BastionError as error:
            reply = error.to_reply()
        except Exception:
            logger.exception(
                "handler failed", extra={"endpoint": endpoint.name, "subject": endpoint.subject}
            )
            reply = ErrorReply(
                code=codes.INTERNAL,
                message=f"the {self.name} service failed on this request; its log has the detail",
            )
        else:
            return result, None
        endpoint.errors += 1
        endpoint.last_error = f"{reply.code}: {reply.message}"[:200]
        return reply, reply

    async def _respond(self, request: Request, reply: object, error: ErrorReply | None) -> None:
        if not request._msg.reply:
            return  # published without a reply subject: nobody is waiting for an answer
        headers = None
        if error is not None:
            headers = {
                "Nats-Service-Error": error.message[:1024],
                "Nats-Service-Error-Code": _STATUS_OF_CODE.get(error.code, "500"),
                "Bastion-Error-Code": error.code,
            }
        await request.respond(encode(reply), headers=headers)

    def _fill_stats(self, stats: EndpointStats) -> dict[str, int]:
        # micro counts a request when the callback returns; the real work happens later in
        # the task group, so the counters that matter are ours.
        endpoint = self.endpoints.get(stats.name)
        if endpoint is None:
            return {}
        stats.num_requests = endpoint.requests
        stats.num_errors = endpoint.errors
        stats.last_error = endpoint.last_error
        stats.processing_time = endpoint.processing_ns
        stats.average_processing_time = endpoint.processing_ns // max(endpoint.requests, 1)
        return {"in_flight": endpoint.in_flight}
