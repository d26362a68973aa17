"""Log lines are JSON with the trace id; trace context travels through headers."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry import trace

from bastion.shared.errors import InvalidInput
from bastion.shared.logs import JsonFormatter
from bastion.shared.telemetry import (
    Telemetry,
    configure_telemetry,
    context_from_headers,
    headers_with_context,
    resource_for,
    tracer,
)
from tests.helpers.tracing import Spans


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.makeLogRecord({"name": "bastion.test", "levelname": "WARNING", "msg": message})
    made.__dict__.update(extra)
    return made


def test_a_log_line_is_json_with_service_level_message_and_extra_fields() -> None:
    line = json.loads(JsonFormatter("policy").format(record("hello", endpoint="decide")))
    assert line["service"] == "policy"
    assert line["level"] == "warning"
    assert line["message"] == "hello"
    assert line["endpoint"] == "decide"
    assert "trace_id" not in line


def test_a_log_line_inside_a_span_carries_its_trace_and_span_ids(spans: Spans) -> None:
    with tracer().start_as_current_span("work") as span:
        line = json.loads(JsonFormatter("policy").format(record("inside")))
    context = span.get_span_context()
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")


def test_the_trace_context_survives_a_trip_through_headers(spans: Spans) -> None:
    with tracer().start_as_current_span("caller") as span:
        headers = headers_with_context({"x-other": "kept"})
    assert headers["x-other"] == "kept"
    assert headers["traceparent"].split("-")[1] == format(span.get_span_context().trace_id, "032x")
    remote = trace.get_current_span(context_from_headers(headers)).get_span_context()
    assert remote.trace_id == span.get_span_context().trace_id
    assert remote.is_remote


def test_headers_without_a_traceparent_give_an_empty_context() -> None:
    assert not trace.get_current_span(context_from_headers(None)).get_span_context().is_valid
    assert not trace.get_current_span(context_from_headers({})).get_span_context().is_valid


def test_with_no_exporter_asked_for_nothing_is_installed_and_spans_cost_nothing() -> None:
    installed = configure_telemetry("policy", {})
    assert installed == Telemetry(None, None)
    assert configure_telemetry("policy", {"OTEL_TRACES_EXPORTER": "none"}) == installed
    disabled = {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}
    assert configure_telemetry("policy", disabled) == installed
    with tracer().start_as_current_span("unexported") as span:
        assert not span.is_recording()


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({}, "bastion-policy"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=policy%2Dprod,team=core"}, "policy-prod"),
        ({"OTEL_SERVICE_NAME": "decider", "OTEL_RESOURCE_ATTRIBUTES": "service.name=x"}, "decider"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod"}, "bastion-policy"),
    ],
)
def test_a_service_name_the_operator_gives_is_kept_else_bastion_names_the_service(
    env: dict[str, str], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        if variable in env:
            monkeypatch.setenv(variable, env[variable])  # what the SDK's detector reads
        else:
            monkeypatch.delenv(variable, raising=False)
    attributes = resource_for("policy", env).attributes
    assert attributes["service.name"] == name
    assert attributes["service.version"]
    if "team=core" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        assert attributes["team"] == "core"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "use otlp, console or none"),
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, "use otlp, console or none"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "http/protobuf only",
        ),
        (
            {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
            "http/protobuf only",
        ),
    ],
)
def test_an_exporter_or_protocol_bastion_does_not_ship_is_refused_with_a_sentence(
    env: dict[str, str], said: str
) -> None:
    with pytest.raises(InvalidInput, match=said):
        configure_telemetry("policy", env)
