"""A real OTLP/HTTP receiver on 127.0.0.1: what Bastion's exporters send, decoded and kept.

It takes `POST /v1/traces` and `POST /v1/metrics` as the OTLP exporters send them
(protobuf, gzip or not), decodes them with `opentelemetry-proto`, and keeps each span
flat (name, ids, kind, service, attributes, times) and each metric data point with the
service that sent it. A test or benchmark points `OTEL_EXPORTER_OTLP_ENDPOINT` at `url`.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["MetricPoint", "ReceivedSpan", "Receiver", "otlp_receiver"]

_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    service: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    error: bool
    links: tuple[tuple[str, str], ...]
    """The (trace id, span id) of each span this one links to."""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True)
class MetricPoint:
    service: str
    name: str
    unit: str
    attributes: dict[str, Any]
    value: float
    """A sum's or gauge's value, or a histogram's count."""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        found[pair.key] = _value(pair.value)
    return found


@dataclass
class Receiver:
    """What arrived so far; `wait_for` polls it until a condition holds."""

    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[MetricPoint] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def take_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            service = str(_attributes(resource_spans.resource.attributes).get("service.name"))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=_KINDS.get(span.kind, "unspecified"),
                            service=service,
                            attributes=_attributes(span.attributes),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            error=span.status.code == 2,
                            links=tuple((k.trace_id.hex(), k.span_id.hex()) for k in span.links),
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def take_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        found = []
        for resource_metrics in request.resource_metrics:
            service = str(_attributes(resource_metrics.resource.attributes).get("service.name"))
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        if kind == "histogram":
                            value = float(point.count)
                        else:
                            value = float(point.as_double or point.as_int)
                        found.append(
                            MetricPoint(
                                service,
                                metric.name,
                                metric.unit,
                                _attributes(point.attributes),
                                value,
                            )
                        )
        with self.lock:
            self.points.extend(found)

    def wait_for(self, ready: Callable[[Receiver], bool], timeout_s: float = 30.0) -> None:
        """Return once `ready(self)` holds; fail with what arrived when it does not in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                if ready(self):
                    return
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in self.spans})
                raise AssertionError(f"not received in {timeout_s} s; spans so far: {names}")
            time.sleep(0.05)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                receiver.take_traces(body)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                receiver.take_metrics(body)
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a test's output is not the place for an access log."""

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver listening on a free loopback port for the length of the block."""
    receiver = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
