"""One trace per tool call, collected by a real OTLP receiver from the six services of
`bastion up`, each exporting as the standard `OTEL_*` variables say."""

from __future__ import annotations

import functools
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from bastion.cli.natsserver import free_port
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalAnswer, ApprovalAnswered
from bastion.proto.session import OpenSession, SessionInfo
from bastion.proto.tools import CallParked, CallResult, ToolCall, ToolOutput
from bastion.shared.bus import connect, request
from bastion.shared.statedir import find_bus_settings
from tests.helpers.otlp import MetricPoint, ReceivedSpan, Receiver, otlp_receiver
from tests.helpers.owners import owned

pytestmark = pytest.mark.e2e

BASTION = [sys.executable, "-m", "bastion.cli"]
# The services' spans, as OpenTelemetry's messaging conventions name them.
CALL = f"process {subjects.SESSION_CALL_ANY}"
DECIDE = f"process {subjects.POLICY_DECIDE}"
EXEC = f"process {subjects.SANDBOX_EXEC}"


@dataclass
class TracedUp:
    state_dir: Path
    front_door: str
    receiver: Receiver


@pytest.fixture(scope="module")
def traced_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedUp]:
    state_dir = tmp_path_factory.mktemp("traced") / "state"
    with otlp_receiver() as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BASTION_", "OTEL_"))}
        env |= {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "300",
        }
        process = subprocess.Popen(
            [*BASTION, "up", "--state-dir", str(state_dir), "--http-port", str(free_port())],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        output: list[str] = []
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            if line.startswith(("ready:", "error:")):
                break
        assert output and output[-1].startswith("ready:"), "\n".join(output)
        [door] = [m[1] for o in output if (m := re.match(r"front door: (\S+) ", o))]
        try:
            yield TracedUp(state_dir, door, receiver)
        finally:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=60)


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [(s.service, s.name) for s in spans])
    return found[0]


def _parent_of(spans: list[ReceivedSpan], child: ReceivedSpan) -> ReceivedSpan:
    [parent] = [s for s in spans if s.span_id == child.parent_id]
    return parent


def _ancestors(spans: list[ReceivedSpan], span: ReceivedSpan) -> list[str]:
    """The names from `span`'s parent up to the trace's root."""
    names = []
    while span.parent_id and any(s.span_id == span.parent_id for s in spans):
        span = _parent_of(spans, span)
        names.append(span.name)
    return names


async def _shell_call_under(traced: TracedUp, workspace: Path, agent_span: SpanContext) -> str:
    """Open a session and run one `shell` call as if from inside the agent's span."""
    async with connect(find_bus_settings(None, traced.state_dir, env={}), "trace-test") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(agent="traced", workspace=str(workspace), shell=True, autonomy="L3"),
            SessionInfo,
            timeout_s=30,
        )
        with trace.use_span(NonRecordingSpan(agent_span)):
            result: CallResult = await request(
                client,
                subjects.session_call(session.session_id),
                ToolCall(tool="shell", input={"command": "echo traced"}),
                CallResult,
                timeout_s=60,
            )
    assert isinstance(result, ToolOutput) and "traced" in result.text, result
    return session.session_id


def test_a_shell_call_is_one_trace_with_a_span_in_each_service_it_crosses(
    traced_up: TracedUp, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    agent_span = _agent_span()
    trace_id = format(agent_span.trace_id, "032x")
    session_id = anyio.run(_shell_call_under, traced_up, workspace, agent_span)

    receiver = traced_up.receiver
    receiver.wait_for(lambda r: _complete(r.trace(trace_id), EXEC, "sandbox.run"))
    spans = receiver.trace(trace_id)

    call = _one(spans, CALL)
    assert call.parent_id == format(agent_span.span_id, "016x")  # the caller's trace continues
    assert call.kind == "consumer" and call.service == "bastion-orchestrator"
    assert call.attributes["bastion.session.id"] == session_id
    assert call.attributes["bastion.tool"] == "shell"
    assert call.attributes["bastion.decision"] == "allow"

    decide = _one(spans, DECIDE)
    assert decide.kind == "consumer" and decide.service == "bastion-policy"
    assert decide.attributes["bastion.decision"] == "allow"
    assert _ancestors(spans, decide) == [
        "send bastion.v1.policy.decide",
        "orchestrator.policy",
        CALL,
    ]

    execute = _one(spans, EXEC)
    assert execute.kind == "consumer" and execute.service == "bastion-sandbox"
    assert execute.attributes["bastion.session.id"] == session_id
    assert _ancestors(spans, execute) == [
        "send bastion.v1.sandbox.exec",
        "orchestrator.execute",
        "orchestrator.journal.run",
        CALL,
    ]
    assert _parent_of(spans, _one(spans, "sandbox.run")) == execute
    for stage in ("orchestrator.hooks.before_tool", "orchestrator.hooks.after_tool"):
        assert _parent_of(spans, _one(spans, stage)) == call

    # Never an input: the command is in no attribute of any span.
    assert not any("echo traced" in str(v) for s in spans for v in s.attributes.values())


async def _park_a_shell_call(
    traced: TracedUp, workspace: Path, agent_span: SpanContext = trace.INVALID_SPAN_CONTEXT
) -> str:
    """A shell call at L2 asks a person: it is parked and waits. Its request id."""
    async with connect(find_bus_settings(None, traced.state_dir, env={}), "trace-test") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(agent="parked", workspace=str(workspace), shell=True, autonomy="L2"),
            SessionInfo,
            timeout_s=30,
        )
        with trace.use_span(NonRecordingSpan(agent_span)):
            parked = await request(
                client,
                subjects.session_call(session.session_id),
                ToolCall(tool="shell", input={"command": "true"}),
                CallResult,
                timeout_s=60,
            )
    assert isinstance(parked, CallParked), parked
    assert f"parked as request {parked.request_id}" in parked.message
    return parked.request_id


async def _approve(traced: TracedUp, request_id: str) -> ApprovalAnswered:
    async with connect(find_bus_settings(None, traced.state_dir, env={}), "trace-test") as client:
        answered: ApprovalAnswered = await request(
            client,
            subjects.APPROVALS_ANSWER,
            ApprovalAnswer(request_id=request_id, approve=True, by="test:alice"),
            ApprovalAnswered,
            timeout_s=60,
        )
    return answered


def _points(r: Receiver, name: str, **attributes: str) -> list[MetricPoint]:
    return [p for p in r.points if p.name == name and p.attributes == attributes]


def test_calls_decisions_latency_sandboxes_and_approvals_arrive_as_metrics(
    traced_up: TracedUp, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    anyio.run(_shell_call_under, traced_up, workspace, trace.INVALID_SPAN_CONTEXT)
    anyio.run(_park_a_shell_call, traced_up, workspace)

    def counted(r: Receiver) -> bool:
        ok = {"bastion.tool": "shell", "bastion.outcome": "ok"}
        found = [
            _points(r, "bastion.call.count", **ok),
            _points(r, "bastion.call.duration", **ok),
            _points(r, "bastion.decision.count", **{"bastion.decision": "allow"}),
            _points(r, "bastion.decision.count", **{"bastion.decision": "ask"}),
            _points(r, "bastion.sandbox.active", **{"bastion.sandbox.backend": "bwrap"}),
            [p for p in _points(r, "bastion.approval.pending") if p.value >= 1],
        ]
        return all(found) and max(p.value for p in found[0]) >= 1

    traced_up.receiver.wait_for(counted)
    points = traced_up.receiver.points
    assert {p.service for p in points if p.name == "bastion.call.count"} == {"bastion-orchestrator"}
    assert {p.service for p in points if p.name == "bastion.decision.count"} == {"bastion-policy"}
    assert {p.unit for p in points if p.name == "bastion.call.duration"} == {"s"}


async def _over_mcp(url: str, token: str, agent_span: SpanContext, tool: str, **args: str) -> None:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120)
    )
    async with (
        http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as mcp,
    ):
        # The SDK's client puts the current trace context in the request's `_meta`.
        with trace.use_span(NonRecordingSpan(agent_span)):
            ran = await mcp.call_tool(tool, dict(args))
    [content] = ran.content
    assert isinstance(content, TextContent) and not ran.is_error, ran


def _complete(spans: list[ReceivedSpan], *names: str) -> bool:
    """The trace has arrived from each service: each process exports on its own schedule."""
    return {CALL, DECIDE, *names} <= {s.name for s in spans}


def _token(traced: TracedUp, workspace: Path) -> str:
    created = subprocess.run(
        [*BASTION, "token", "create", "--agent", "door", "--autonomy", "L3",
         "--workspace", str(workspace), "--shell", "--state-dir", str(traced.state_dir)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    return created.stdout.splitlines()[0]


def _agent_span() -> SpanContext:
    return SpanContext(
        trace_id=int(secrets.token_hex(16), 16),
        span_id=int(secrets.token_hex(8), 16),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def test_a_call_through_the_mcp_front_door_is_one_trace_from_the_door_to_the_sandbox(
    traced_up: TracedUp, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    token = _token(traced_up, workspace)
    # write_file: the one tool this module calls through the door without a trace of its own
    anyio.run(
        functools.partial(
            _over_mcp, traced_up.front_door, token, trace.INVALID_SPAN_CONTEXT, "write_file",
            path="door.txt", content="through the door\n",
        )
    )  # fmt: skip
    door_name = "tools/call write_file"

    def door_trace(r: Receiver) -> list[ReceivedSpan]:
        doors = [s for s in r.spans if s.name == door_name]
        return r.trace(doors[0].trace_id) if doors else []

    traced_up.receiver.wait_for(
        lambda r: _complete(door_trace(r), door_name, "process bastion.v1.sandbox.files")
    )
    spans = door_trace(traced_up.receiver)
    door = _one(spans, door_name)
    assert door.service == "bastion-mcp" and door.kind == "server"
    assert door.attributes["bastion.tool"] == "write_file"
    # One root: the door's span; every other span of the call is in the trace it began.
    received = {s.span_id for s in spans}
    assert [s for s in spans if s.parent_id not in received] == [door]
    assert {s.service for s in spans} >= {
        "bastion-mcp",
        "bastion-orchestrator",
        "bastion-policy",
        "bastion-sandbox",
    }
    files = _one(spans, "process bastion.v1.sandbox.files")
    assert _ancestors(spans, files)[-2:] == ["send bastion.v1.session.*.call", door_name]
    assert (workspace / "door.txt").read_text() == "through the door\n"


def test_the_front_door_continues_the_trace_an_mcp_client_sends_in_meta(
    traced_up: TracedUp, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    agent_span = _agent_span()
    trace_id = format(agent_span.trace_id, "032x")
    token = _token(traced_up, workspace)
    anyio.run(
        functools.partial(
            _over_mcp, traced_up.front_door, token, agent_span, "shell", command="echo door"
        )
    )

    traced_up.receiver.wait_for(
        lambda r: _complete(r.trace(trace_id), "tools/call shell", EXEC, "sandbox.run")
    )
    spans = traced_up.receiver.trace(trace_id)
    door = _one(spans, "tools/call shell")
    assert door.parent_id  # the client's span (in the client's process), not a new root
    execute = _one(spans, EXEC)
    assert _ancestors(spans, execute)[-2:] == ["send bastion.v1.session.*.call", "tools/call shell"]
    assert _parent_of(spans, _one(spans, "sandbox.run")) == execute


def test_an_approved_call_runs_in_the_answers_trace_linked_to_the_call_that_was_parked(
    traced_up: TracedUp, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    asked = _agent_span()
    request_id = anyio.run(_park_a_shell_call, traced_up, workspace, asked)
    answered = anyio.run(_approve, traced_up, request_id)
    assert isinstance(answered.result, ToolOutput), answered.result

    parked_trace = format(asked.trace_id, "032x")

    def approved_runs(r: Receiver) -> list[ReceivedSpan]:
        return [
            s
            for s in r.spans
            if s.name == "orchestrator.approved_run"
            and any(link[0] == parked_trace for link in s.links)
        ]

    traced_up.receiver.wait_for(lambda r: bool(approved_runs(r)))
    [run] = approved_runs(traced_up.receiver)
    answer_trace = {"process bastion.v1.approvals.answer", DECIDE, "sandbox.run"}
    traced_up.receiver.wait_for(lambda r: answer_trace <= {s.name for s in r.trace(run.trace_id)})
    spans = traced_up.receiver.trace(run.trace_id)
    assert run.trace_id != parked_trace
    assert "orchestrator.approved_run" in _ancestors(spans, _one(spans, EXEC))
    assert _ancestors(spans, run)[-1] == "process bastion.v1.approvals.answer"
    parked_spans = traced_up.receiver.trace(parked_trace)
    call = _one(parked_spans, CALL)
    assert call.attributes["bastion.decision"] == "ask"
    park = _one(parked_spans, "orchestrator.approval.park")
    assert _parent_of(parked_spans, park) == call
    assert run.links == ((parked_trace, park.span_id),)
