"""Fixtures for the runtime tests: a test service with controllable handlers, and captured spans."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from bastion.proto._base import Ingress, Message
from bastion.shared.bus import Client
from bastion.shared.errors import InvalidInput
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings

SUBJECT = "bastion.v1.test.echo"
STRICT_SUBJECT = "bastion.v1.test.strict"
SECRET = "hunter2"


class Echo(Message, frozen=True, kw_only=True, tag="test.echo"):
    """What the test endpoint takes: `text` chooses what the handler does."""

    text: str


class StrictEcho(Ingress, frozen=True, kw_only=True, tag="test.strict"):
    """The same, as a message an agent fills: unknown fields are refused."""

    text: str


class Echoed(Message, frozen=True, kw_only=True, tag="test.echoed"):
    text: str


@dataclass
class Harness:
    """The test endpoint's handler and the events a test steers it with."""

    started: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    seen: list[RequestContext] = field(default_factory=list)
    huge_bytes: int = 16 * 1024 * 1024

    async def handle(self, request: Echo | StrictEcho, context: RequestContext) -> object:
        self.seen.append(context)
        if request.text == "block":
            self.started.set()
            await self.release.wait()
            return Echoed(text="released")
        if request.text == "raise":
            raise ValueError(f"token={SECRET}")
        if request.text == "invalid":
            raise InvalidInput("the text is not acceptable: say something else")
        if request.text == "unencodable":
            return object()
        if request.text == "huge":
            return Echoed(text="x" * self.huge_bytes)
        return Echoed(text=request.text)

    def service(self) -> Service:
        service = Service("testsvc", "1.2.3", "A service that exists for the runtime tests.")
        service.add_endpoint("echo", SUBJECT, Echo, self.handle)
        service.add_endpoint("strict", STRICT_SUBJECT, StrictEcho, self.handle)
        return service

    def setup(self) -> Any:
        @asynccontextmanager
        async def setup(_client: Client, _settings: BusSettings) -> AsyncIterator[Service]:
            yield self.service()

        return setup


@pytest.fixture
def harness() -> Harness:
    return Harness()


@dataclass
class Spans:
    """Spans ended in this test, and a way to wait for one without sleeping."""

    exporter: InMemorySpanExporter

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    async def wait_for(self, name: str) -> ReadableSpan:
        while True:  # bounded by the test's fail_after
            for span in self.finished():
                if span.name == name:
                    return span
            await anyio.lowlevel.checkpoint()


def span_ancestry(finished: tuple[ReadableSpan, ...], span: ReadableSpan) -> list[str]:
    """The names of `span`'s parent, its parent's parent, … among `finished`."""
    by_id = {s.context.span_id: s for s in finished if s.context is not None}
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


@pytest.fixture
def spans() -> Iterator[Spans]:
    """A tracer provider exporting to memory, installed globally for one test, then undone.

    OpenTelemetry lets a process set its provider once; a test resets that guard and puts
    the previous provider back so other tests see the process as it was.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    try:
        yield Spans(exporter)
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


def raw(message: object) -> bytes:
    return msgspec.msgpack.encode(message)
