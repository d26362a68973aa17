"""A small OTLP/HTTP trace receiver and viewer, for compose where no collector image can
be pulled.

It takes `POST /v1/traces` (protobuf or JSON, as the OTLP/HTTP exporters send), prints one
JSON line per span (what the collector's debug exporter does), keeps the last spans in
memory, and shows them: `GET /` is each recent trace as an indented tree, `GET /traces`
the same as JSON, `GET /healthz` answers 200. It is a viewer for one machine, not a store:
point `OTEL_EXPORTER_OTLP_ENDPOINT` at a real collector in production.
"""

from __future__ import annotations

import collections
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import Parse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KEEP_SPANS = 20_000
MAX_BODY = 16 * 1024 * 1024
TRACES_SHOWN = 30

_spans: collections.deque[dict[str, Any]] = collections.deque(maxlen=KEEP_SPANS)
_lock = threading.Lock()


def _flatten(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    spans = []
    for resource in request.resource_spans:
        attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
        service = attributes.get("service.name", "?")
        for scope in resource.scope_spans:
            for span in scope.spans:
                spans.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex(),
                        "service": service,
                        "name": span.name,
                        "start_ns": span.start_time_unix_nano,
                        "duration_ms": (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6,
                        "status": span.status.code,
                    }
                )
    return spans


def _traces() -> dict[str, list[dict[str, Any]]]:
    """The most recent traces, newest first, each its spans by start."""
    with _lock:
        spans = list(_spans)
    by_trace: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for span in spans:
        by_trace[span["trace_id"]].append(span)
    recent = sorted(by_trace.items(), key=lambda item: -min(s["start_ns"] for s in item[1]))
    return {trace: sorted(s, key=lambda s: s["start_ns"]) for trace, s in recent[:TRACES_SHOWN]}


def _tree(spans: list[dict[str, Any]]) -> list[str]:
    children: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    ids = {s["span_id"] for s in spans}
    for span in spans:
        children[span["parent_id"] if span["parent_id"] in ids else ""].append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            lines.append(
                f"{'  ' * depth}{span['service']}: {span['name']} {span['duration_ms']:.2f} ms"
            )
            walk(span["span_id"], depth + 1)

    walk("", 1)
    return lines


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.path != "/v1/traces" or not 0 < length <= MAX_BODY:
            self.send_error(404 if self.path != "/v1/traces" else 413)
            return
        body = self.rfile.read(length)
        request = ExportTraceServiceRequest()
        try:
            if self.headers.get("Content-Type", "").startswith("application/json"):
                Parse(body, request)
            else:
                request.ParseFromString(body)
        except Exception:  # a body that is not OTLP: say so, keep serving
            self.send_error(400, "not an OTLP trace export")
            return
        spans = _flatten(request)
        with _lock:
            _spans.extend(spans)
        sys.stdout.write("".join(json.dumps(s) + "\n" for s in spans))
        sys.stdout.flush()
        answer = ExportTraceServiceResponse().SerializeToString()
        self._answer(200, "application/x-protobuf", answer)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._answer(200, "text/plain", b"ok\n")
        elif self.path == "/traces":
            self._answer(200, "application/json", json.dumps(_traces()).encode())
        elif self.path == "/":
            text = []
            for trace, spans in _traces().items():
                text += [f"trace {trace} ({len(spans)} spans)", *_tree(spans), ""]
            self._answer(200, "text/plain; charset=utf-8", "\n".join(text).encode())
        else:
            self.send_error(404)

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the spans are the output."""


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 4318
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
