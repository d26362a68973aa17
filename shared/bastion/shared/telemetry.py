"""Traces and metrics: providers set up from the standard `OTEL_*` variables, W3C context in
NATS headers, and the few span helpers every service uses.

Library code only calls `tracer()`, `span()` and `annotate()` (and records into
`bastion.shared.metrics`); a process's entry point calls `configure_telemetry` once.
Exporters are chosen by `OTEL_TRACES_EXPORTER` and `OTEL_METRICS_EXPORTER` (`otlp`,
`console` or `none`; `none` when unset), the endpoint, headers and timeouts by the usual
`OTEL_EXPORTER_OTLP_*` variables, which the OTLP exporters read themselves. With no
exporter nothing is installed: the API's no-op providers stay, so a span costs a look at
the provider (`tracing()`: a no-op span is not even made), and a `traceparent` that came
in still goes out unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
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
    "carries_context",
    "configure_telemetry",
    "context_from_headers",
    "headers_with_context",
    "messaging_attributes",
    "resource_for",
    "span",
    "tracer",
    "tracing",
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


def _given_name(env: Mapping[str, str]) -> str:
    """The `service.name` the operator gave: `OTEL_SERVICE_NAME`, else the one in
    `OTEL_RESOURCE_ATTRIBUTES` (`k=v` pairs, comma-separated, values percent-encoded)."""
    if name := env.get("OTEL_SERVICE_NAME", "").strip():
        return name
    for pair in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == SERVICE_NAME and value.strip():
            return unquote(value.strip())
    return ""


def resource_for(service: str, env: Mapping[str, str]) -> Resource:
    """The SDK's resource (with `OTEL_RESOURCE_ATTRIBUTES`), Bastion's version, and the
    service's name: the one the operator gave, else `bastion-<service>`."""
    name = _given_name(env) or f"bastion-{service}"
    return Resource.create({SERVICE_NAME: name, SERVICE_VERSION: VERSION})


def configure_telemetry(service: str, env: Mapping[str, str] | None = None) -> Telemetry:
    """Install this process's tracer and meter providers, if `OTEL_*` asks for an exporter.

    The service name is `OTEL_SERVICE_NAME`, else a `service.name` that
    `OTEL_RESOURCE_ATTRIBUTES` gives, else `bastion-<service>`; the rest of
    `OTEL_RESOURCE_ATTRIBUTES` adds to the resource; `OTEL_SDK_DISABLED=true` turns both off.

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
    resource = resource_for(service, env)
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


_NO_OP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_PROVIDER_FROM_ENV = OTEL_PYTHON_TRACER_PROVIDER in os.environ
"""Whether the API is to load a provider named in the environment (it reads the variable
at every `get_tracer_provider()` until one is set: a look-up this module makes once)."""


def tracing() -> bool:
    """Whether a tracer provider is installed, so spans are made. Without one a span would
    be a no-op one carrying its parent's context: leaving the current span as it is does
    the same, for less."""
    provider = trace._TRACER_PROVIDER  # what get_tracer_provider() gives once one is set
    if provider is None:
        if not _PROVIDER_FROM_ENV:
            return False
        provider = trace.get_tracer_provider()
    return not isinstance(provider, _NO_OP_PROVIDERS)


@contextmanager
def span(name: str, kind: SpanKind = SpanKind.INTERNAL, **attributes: str) -> Iterator[Span]:
    """A child span of the current one named `name`; `attributes` as `annotate` names them.
    With no tracer provider installed, the current span (nothing is recorded either way)."""
    if not tracing():
        yield trace.get_current_span()
        return
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


def messaging_attributes(operation: str, subject: str, template: str = "") -> dict[str, str]:
    """A messaging span's attributes as OpenTelemetry's messaging conventions name them:
    `operation` is `send` or `process`, `subject` the one the message went to, `template`
    the subscription's pattern it matched (when it has wildcards) or the subject with its
    session ids as `*`."""
    attributes = {
        "messaging.system": "nats",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": subject,
    }
    if template and template != subject:
        attributes["messaging.destination.template"] = template
    return attributes


def headers_with_context(headers: dict[str, str] | None = None) -> dict[str, str]:
    """`headers` plus the current span's `traceparent` (and `tracestate`)."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier


def carries_context(headers: Mapping[str, str]) -> bool:
    """Whether `headers` hold a field the installed propagators read (`traceparent`,
    `tracestate`, `baggage` by default; `OTEL_PROPAGATORS` may name others)."""
    return any(name in headers for name in propagate.get_global_textmap().fields)


def context_from_headers(headers: Mapping[str, str] | None) -> Context:
    """The trace context a message's headers carry (an empty one if none)."""
    return propagate.extract(dict(headers or {}))
