"""Traces and metrics: providers set up from the standard `OTEL_*` variables, W3C context in
NATS headers, and the few span helpers every service uses.

Library code only calls `tracer()`, `span()` and `annotate()` (and records into
`bastion.shared.metrics`); a process's entry point calls `configure_telemetry` once.
Exporters are chosen by `OTEL_TRACES_EXPORTER` and `OTEL_METRICS_EXPORTER` (`otlp`,
`console` or `none`; `none` when unset), the endpoint, headers and timeouts by the usual
`OTEL_EXPORTER_OTLP_*` variables, which the OTLP exporters read themselves. With no
exporter nothing is installed: the API's no-op providers stay, so a span costs a context
lookup, and a `traceparent` that came in still goes out unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind

from bastion.shared.errors import InvalidInput
from bastion.shared.version import VERSION

__all__ = [
    "Telemetry",
    "annotate",
    "configure_telemetry",
    "context_from_headers",
    "headers_with_context",
    "span",
    "tracer",
]

_PROTOCOLS = ("OTEL_EXPORTER_OTLP_PROTOCOL",)
_EXPORTERS = ("otlp", "console", "none")


@dataclass(frozen=True)
class Telemetry:
    """What `configure_telemetry` installed; `shutdown` flushes and stops it (idempotent)."""

    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _chosen(env: Mapping[str, str], variable: str) -> list[str]:
    names = [n.strip() for n in env.get(variable, "none").split(",") if n.strip()]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise InvalidInput(
            f"{variable}={env[variable]!r} names an exporter Bastion does not ship "
            f"({', '.join(unknown)}): use otlp, console or none"
        )
    return [n for n in names if n != "none"]


def _check_protocol(env: Mapping[str, str], signal: str) -> None:
    for variable in (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", *_PROTOCOLS):
        protocol = env.get(variable, "").strip()
        if protocol and protocol != "http/protobuf":
            raise InvalidInput(
                f"{variable}={protocol!r}: Bastion exports OTLP over http/protobuf only (the "
                "gRPC exporter is not installed); set it to http/protobuf and point "
                "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318)"
            )
        if protocol:
            return


def _span_exporter(name: str) -> SpanExporter:
    return OTLPSpanExporter() if name == "otlp" else ConsoleSpanExporter()


def _metric_exporter(name: str) -> MetricExporter:
    return OTLPMetricExporter() if name == "otlp" else ConsoleMetricExporter()


def configure_telemetry(service: str, env: Mapping[str, str] | None = None) -> Telemetry:
    """Install this process's tracer and meter providers, if `OTEL_*` asks for an exporter.

    The service name is `OTEL_SERVICE_NAME`, else `bastion-<service>`; `OTEL_RESOURCE_ATTRIBUTES`
    adds to the resource; `OTEL_SDK_DISABLED=true` turns both off.

    Raises:
        InvalidInput: an exporter or protocol that Bastion does not ship is asked for.
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Telemetry(None, None)
    span_exporters = _chosen(env, "OTEL_TRACES_EXPORTER")
    metric_exporters = _chosen(env, "OTEL_METRICS_EXPORTER")
    if "otlp" in span_exporters:
        _check_protocol(env, "TRACES")
    if "otlp" in metric_exporters:
        _check_protocol(env, "METRICS")
    resource = Resource.create(
        {
            SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or f"bastion-{service}",
            SERVICE_VERSION: VERSION,
        }
    )
    tracer_provider = meter_provider = None
    if span_exporters:
        tracer_provider = TracerProvider(resource=resource)
        for name in span_exporters:
            tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(name)))
        trace.set_tracer_provider(tracer_provider)
    if metric_exporters:
        # The reader's interval is OTEL_METRIC_EXPORT_INTERVAL (ms), read by the SDK.
        readers = [PeriodicExportingMetricReader(_metric_exporter(n)) for n in metric_exporters]
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider)


def tracer() -> trace.Tracer:
    return trace.get_tracer("bastion", VERSION)


@contextmanager
def span(name: str, kind: SpanKind = SpanKind.INTERNAL, **attributes: str) -> Iterator[Span]:
    """A child span of the current one named `name`; `attributes` as `annotate` names them."""
    with tracer().start_as_current_span(name, kind=kind) as current:
        annotate(**attributes)
        yield current


_ATTRIBUTE_NAMES = {
    "session_id": "bastion.session.id",
    "tenant": "bastion.tenant",
    "tool": "bastion.tool",
    "decision": "bastion.decision",
    "server": "bastion.mcp.server",
}


def annotate(**values: str) -> None:
    """Set Bastion's attributes (`session_id`, `tenant`, `tool`, `decision`, `server`) on
    the current span; empty values are skipped. Never pass an input or a secret here."""
    current = trace.get_current_span()
    if not current.is_recording():
        return
    for key, value in values.items():
        if value:
            current.set_attribute(_ATTRIBUTE_NAMES[key], value)


def headers_with_context(headers: dict[str, str] | None = None) -> dict[str, str]:
    """`headers` plus the current span's `traceparent` (and `tracestate`)."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier


def context_from_headers(headers: Mapping[str, str] | None) -> Context:
    """The trace context a message's headers carry (an empty one if none)."""
    return propagate.extract(dict(headers or {}))
