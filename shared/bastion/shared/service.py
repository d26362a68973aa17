"""Serving endpoints as a NATS micro service, with every request answered and none stalling.

`nats.micro` gives discovery (`$SRV.PING|INFO|STATS`) for free but has two traps this
module closes: it answers an unhandled exception with `repr(exception)` (which may hold
secrets or input), and each subscription handles one message at a time. So a handler here
never runs inside the subscription callback: the callback hands the request to the
service's task group and returns — unless its endpoint is `inline`, for a handler that
never waits (a policy decision): it runs in the callback, one request after another,
which saves a task per request. The work then decodes the payload (a payload of the wrong
shape gets a `bad_request` reply), opens a CONSUMER span `process <subject>` (the
endpoint's subject, wildcards and all; OpenTelemetry's messaging conventions) that continues
the caller's `traceparent` (with the session, tenant and tool the message names), runs
the typed handler, and answers with its result or a typed `ErrorReply`; an unexpected
exception is logged and answered with a fixed sentence. The answer goes to the caller's
reply subject when the request names one (`Bastion-Reply-Inbox`, see `bastion.shared.bus`),
which no response window bounds, else to the request's reply subject.
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
import nats.errors
from anyio.abc import TaskGroup
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointStats
from nats.micro.service import Service as MicroService
from opentelemetry.trace import SpanKind, Status, StatusCode

from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply
from bastion.shared.bus import answer, round_trip
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BastionError
from bastion.shared.telemetry import (
    annotate,
    carries_context,
    context_from_headers,
    messaging_attributes,
    tracer,
    tracing,
)

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
    codes.QUOTA_EXCEEDED: "429",
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
    inline: bool = False
    """The handler never waits (nothing it awaits suspends): run in the subscription's
    callback, one request after another, instead of a task each."""


class Service:
    """A Bastion service: a name, a version, and typed endpoints served on one connection."""

    def __init__(
        self, name: str, version: str, description: str = "", max_in_flight: int = 256
    ) -> None:
        self.name = name
        self.version = version
        self.description = description
        self.endpoints: dict[str, Endpoint[Any]] = {}
        self._idle = anyio.Event()
        self._in_flight = 0
        # Backpressure: past this many requests at work, a subscription stops taking new
        # ones until a slot frees, so a flood queues in NATS instead of in this process.
        # A free slot is taken without a turn of the event loop (`fast_acquire`).
        self._slots = anyio.Semaphore(max_in_flight, fast_acquire=True)
        self.instance_id = ""
        self._client: Client | None = None

    def add_endpoint(
        self,
        name: str,
        subject: str,
        request_type: Any,
        handler: Handler[Req],
        *,
        inline: bool = False,
    ) -> None:
        """Serve `handler` on `subject`; it takes a decoded `request_type` and returns a
        message. `inline`: a handler that never waits is run in the subscription's callback."""
        self.endpoints[name] = Endpoint(name, subject, request_type, handler, inline=inline)

    @asynccontextmanager
    async def running(self, client: Client, drain_timeout_s: float = 30.0) -> AsyncIterator[None]:
        """Serve until the block exits; then stop taking requests and finish those in flight.

        Work still running after `drain_timeout_s` is cancelled.
        """
        self._client = client
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
            await round_trip(client)
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(drain_timeout_s):
                    await _stop_taking_requests(micro)
                    while self._in_flight:
                        await self._idle.wait()
                if self._in_flight:
                    logger.warning(
                        "drain timed out: cancelling requests still in flight",
                        extra={"in_flight": self._in_flight, "drain_timeout_s": drain_timeout_s},
                    )
                work.cancel_scope.cancel()

    def _dispatcher(
        self, endpoint: Endpoint[Any], work: TaskGroup
    ) -> Callable[[Request], Awaitable[None]]:
        async def dispatch(request: Request) -> None:
            await self._slots.acquire()
            self._in_flight += 1
            endpoint.in_flight += 1
            if self._idle.is_set():
                self._idle = anyio.Event()
            if endpoint.inline:
                await self._answer(endpoint, request)
            else:
                work.start_soon(self._answer, endpoint, request)

        return dispatch

    async def _answer(self, endpoint: Endpoint[Any], request: Request) -> None:
        headers = request.headers or {}
        try:
            if not tracing() and not carries_context(headers):
                # no span to make, and no caller's context to carry on to what it asks
                data, error = await self._run_handler(endpoint, request, headers)
                await self._respond(endpoint, request, data, error)
                return
            with tracer().start_as_current_span(
                f"process {endpoint.subject}",
                context=context_from_headers(headers),
                kind=SpanKind.CONSUMER,
                attributes={
                    **messaging_attributes("process", request.subject, endpoint.subject),
                    "bastion.service": self.name,
                    "bastion.endpoint": endpoint.name,
                },
            ) as span:
                data, error = await self._run_handler(endpoint, request, headers)
                if error is not None:
                    span.set_status(Status(StatusCode.ERROR, error.code))
                    span.set_attribute("error.type", error.code)
                    span.set_attribute("bastion.error.code", error.code)
                await self._respond(endpoint, request, data, error)
        except Exception:
            # Nothing may escape into the task group: one failed answer must not stop the
            # service. What reaches here is a fault of this module, not of a handler.
            logger.exception("answering a request failed", extra={"endpoint": endpoint.name})
        finally:
            endpoint.in_flight -= 1
            self._in_flight -= 1
            self._slots.release()
            if not self._in_flight:
                self._idle.set()

    async def _run_handler(
        self, endpoint: Endpoint[Any], request: Request, headers: Mapping[str, str]
    ) -> tuple[bytes, ErrorReply | None]:
        """The handler's answer as bytes to send, and the error it is, if it is one.

        The counters are updated here, before the answer leaves, so that a caller who
        reads `$SRV.STATS` right after its reply sees its request counted.
        """
        started = time.perf_counter_ns()
        try:
            message = decode(request.data, endpoint.request_type)
            annotate(**_identity(message))
            result = await endpoint.handler(message, RequestContext(request.subject, headers))
            data = encode(result)
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
            self._count(endpoint, started, None)
            return data, None
        self._count(endpoint, started, reply)
        return encode(reply), reply

    def _count(self, endpoint: Endpoint[Any], started: int, error: ErrorReply | None) -> None:
        endpoint.requests += 1
        endpoint.processing_ns += time.perf_counter_ns() - started
        if error is not None:
            endpoint.errors += 1
            endpoint.last_error = f"{error.code}: {error.message}"[:200]

    async def _respond(
        self, endpoint: Endpoint[Any], request: Request, data: bytes, error: ErrorReply | None
    ) -> None:
        if not request._msg.reply:
            return  # published without a reply subject: nobody is waiting for an answer
        try:
            try:
                await self._send(request, data, _error_headers(error))
            except nats.errors.MaxPayloadError:
                # Refused by the client before anything was sent: say so instead of silence.
                too_big = ErrorReply(
                    code=codes.INTERNAL,
                    message=(
                        f"the {self.name} service's answer is {len(data)} bytes, more than the"
                        " bus carries in one message; ask for less"
                    ),
                )
                endpoint.errors += 1
                endpoint.last_error = f"{too_big.code}: {too_big.message}"[:200]
                await self._send(request, encode(too_big), _error_headers(too_big))
        except nats.errors.Error as failure:
            logger.warning(
                "could not send an answer",
                extra={"endpoint": endpoint.name, "error_type": type(failure).__name__},
            )

    async def _send(self, request: Request, data: bytes, headers: dict[str, str] | None) -> None:
        """The answer, on the caller's reply subject if it named its inbox, else on the
        request's reply subject (within the server's response window)."""
        if self._client is not None:
            await answer(self._client, request._msg, data, self.name, headers)
        else:
            await request.respond(data, headers=headers)

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


def _identity(message: object) -> dict[str, str]:
    """The session, tenant and tool a request names, for its span: never more of it."""
    found = {}
    for name in ("session_id", "tenant", "tool"):
        value = getattr(message, name, None)
        if isinstance(value, str):
            found[name] = value
    return found


def _error_headers(error: ErrorReply | None) -> dict[str, str] | None:
    """The micro service error headers, so `nats` tools see the failure; none on success."""
    if error is None:
        return None
    return {
        "Nats-Service-Error": error.message[:1024],
        "Nats-Service-Error-Code": _STATUS_OF_CODE.get(error.code, "500"),
        "Bastion-Error-Code": error.code,
    }


async def _stop_taking_requests(micro: MicroService) -> None:
    """Drain every endpoint's subscription, then stop the micro service.

    micro's own `stop()` unsubscribes, which drops the requests the server already sent but
    the subscription has not dispatched yet: their callers would wait out a timeout instead
    of being answered. A drain (UNSUB, a round trip, then the backlog) dispatches them all.
    nats.micro has no public way to drain an endpoint, hence the private attributes.
    """
    try:
        for endpoint in micro._endpoints:
            if endpoint._subscription is not None:
                await endpoint._subscription.drain()
                endpoint._subscription = None
        micro._endpoints = []
        await micro.stop()
    except (nats.errors.Error, TimeoutError) as failure:
        # The connection is closed or draining: no request can arrive or be answered anyway.
        logger.warning(
            "could not stop the service cleanly", extra={"error_type": type(failure).__name__}
        )
