"""Tracing: a provider set up from the standard `OTEL_*` variables, and W3C context in headers.

Library code only calls `tracer()`; a process's entry point calls `configure_tracing` once.
The exporter is chosen by `OTEL_TRACES_EXPORTER` (`otlp`, `console` or `none`; `none` when
unset), the endpoint and headers by the usual `OTEL_EXPORTER_OTLP_*` variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

__all__ = ["configure_tracing", "context_from_headers", "headers_with_context", "tracer"]


def _exporter(name: str) -> SpanExporter | None:
    if name == "otlp":
        return OTLPSpanExporter()
    if name == "console":
        return ConsoleSpanExporter()
    return None


def configure_tracing(service: str, env: Mapping[str, str] | None = None) -> TracerProvider:
    """Install this process's tracer provider; spans are exported only if `OTEL_*` asks."""
    env = os.environ if env is None else env
    name = env.get("OTEL_SERVICE_NAME", f"bastion-{service}")
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    for exporter_name in env.get("OTEL_TRACES_EXPORTER", "none").split(","):
        exporter = _exporter(exporter_name.strip())
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def tracer() -> trace.Tracer:
    return trace.get_tracer("bastion")


def headers_with_context(headers: dict[str, str] | None = None) -> dict[str, str]:
    """`headers` plus the current span's `traceparent` (and `tracestate`)."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier


def context_from_headers(headers: Mapping[str, str] | None) -> Context:
    """The trace context a message's headers carry (an empty one if none)."""
    return propagate.extract(dict(headers or {}))
