"""The service wrapper on a real NATS server: every request answered, none leaking or stalling."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg
from opentelemetry.trace import SpanKind

from bastion.proto.errors import ErrorReply
from bastion.shared.bus import Client, connect, request
from bastion.shared.errors import RemoteError, Unavailable
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings
from bastion.shared.telemetry import tracer
from tests.helpers.bus import ServiceRunner, raw_request
from tests.helpers.runtime import SECRET, STRICT_SUBJECT, SUBJECT, Echo, Echoed, Harness, raw
from tests.helpers.tracing import Spans

REPLY = msgspec.msgpack.Decoder(Echoed | ErrorReply)

# Raw requests below flush the test's own connection first: nats-server may answer "no
# responders" to a connection's first request right after another one subscribed (the
# typed `request` helper retries once for that reason; raw `client.request` does not).


async def ask(
    client: Client, payload: bytes, subject: str = SUBJECT
) -> tuple[Echoed | ErrorReply, Msg]:
    reply = await raw_request(client, subject, payload)
    return REPLY.decode(reply.data), reply


async def srv(client: Client, verb: str) -> dict[str, Any]:
    reply = await raw_request(client, f"$SRV.{verb}.testsvc", b"")
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1 not msgpack at all",
        b"",
        raw({"kind": "policy.request", "text": "the wrong message"}),
        raw({"kind": "test.echo"}),
        raw({"kind": "test.echo", "text": 42}),
        raw(["test.echo", "an array"]),
    ],
    ids=["garbage", "empty", "wrong-message", "missing-field", "wrong-type", "wrong-shape"],
)
async def test_a_payload_of_the_wrong_shape_is_answered_with_bad_request(
    client: Client, run_service: ServiceRunner, harness: Harness, payload: bytes
) -> None:
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            answer, reply = await ask(client, payload)
    assert isinstance(answer, ErrorReply)
    assert answer.code == "bad_request"
    assert answer.message.startswith("the request is not a valid Echo")
    assert reply.headers is not None
    assert reply.headers["Bastion-Error-Code"] == "bad_request"
    assert reply.headers["Nats-Service-Error-Code"] == "400"
    assert harness.seen == []


@pytest.mark.parametrize(
    "payload",
    [
        raw({"kind": f"test.{SECRET}", "text": "x"}),
        raw({"kind": "test.strict", "text": "x", f"token={SECRET}": 1}),
        raw({"kind": "test.strict", "text": {SECRET: SECRET}}),
        raw({"kind": "test.strict", "text": f"{SECRET}".encode()}),
    ],
    ids=["tag", "unknown-field-name", "value", "bytes"],
)
async def test_a_bad_request_never_echoes_what_the_caller_sent(
    client: Client, run_service: ServiceRunner, harness: Harness, payload: bytes
) -> None:
    """The reply, its headers and STATS are seen by others (operators, `nats micro stats`)."""
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            answer, reply = await ask(client, payload, STRICT_SUBJECT)
            stats = await srv(client, "STATS")
    assert isinstance(answer, ErrorReply)
    assert answer.code == "bad_request"
    assert SECRET not in answer.message
    assert SECRET not in json.dumps(reply.headers)
    assert SECRET not in json.dumps(stats)


async def test_an_unexpected_exception_answers_internal_and_its_text_leaks_nowhere(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            answer, reply = await ask(client, raw(Echo(text="raise")))
            stats = await srv(client, "STATS")
    assert answer == ErrorReply(
        code="internal",
        message="the testsvc service failed on this request; its log has the detail",
    )
    assert reply.headers is not None
    assert reply.headers["Nats-Service-Error"] == answer.message
    assert reply.headers["Nats-Service-Error-Code"] == "500"
    assert SECRET not in json.dumps(reply.headers)
    assert SECRET not in reply.data.decode(errors="replace")
    endpoint = stats["endpoints"][0]
    assert endpoint["last_error"] == f"internal: {answer.message}"
    assert SECRET not in json.dumps(stats)
    assert "ValueError" not in json.dumps(stats)


async def test_a_typed_error_from_a_handler_reaches_the_caller_with_its_code_and_sentence(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            with pytest.raises(RemoteError) as raised:
                await request(client, SUBJECT, Echo(text="invalid"), Echoed, timeout_s=5)
    assert raised.value.code == "invalid_input"
    assert raised.value.message == "the text is not acceptable: say something else"


@pytest.mark.parametrize("text", ["unencodable", "huge"])
async def test_a_reply_that_cannot_be_sent_is_answered_internal_and_the_service_lives_on(
    client: Client, run_service: ServiceRunner, harness: Harness, text: str
) -> None:
    harness.huge_bytes = client.max_payload + 1
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            answer, _ = await ask(client, raw(Echo(text=text)))
            after = await request(client, SUBJECT, Echo(text="still here"), Echoed, timeout_s=5)
    assert isinstance(answer, ErrorReply)
    assert answer.code == "internal"
    assert after == Echoed(text="still here")
    if text == "huge":
        assert "more than the bus carries in one message" in answer.message


async def test_a_blocked_handler_does_not_stall_the_next_request_to_the_same_endpoint(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    first: list[Echoed] = []

    async def blocked() -> None:
        first.append(await request(client, SUBJECT, Echo(text="block"), Echoed, timeout_s=5))

    with anyio.fail_after(10):
        async with run_service(harness.setup()), anyio.create_task_group() as tasks:
            tasks.start_soon(blocked)
            await harness.started.wait()
            second = await request(client, SUBJECT, Echo(text="second"), Echoed, timeout_s=5)
            assert second == Echoed(text="second")
            assert first == []  # the first is still waiting on its event
            harness.release.set()
    assert first == [Echoed(text="released")]


async def test_ping_info_and_stats_name_the_service_and_count_requests_and_errors(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    with anyio.fail_after(10):
        async with run_service(harness.setup()) as service:
            for text in ("one", "two", "raise"):
                await ask(client, raw(Echo(text=text)))
            await ask(client, b"garbage")
            ping = await srv(client, "PING")
            info = await srv(client, "INFO")
            stats = await srv(client, "STATS")
    for answer in (ping, info, stats):
        assert (answer["name"], answer["version"]) == ("testsvc", "1.2.3")
        assert answer["id"] == service.instance_id
    assert ping["type"] == "io.nats.micro.v1.ping_response"
    assert info["description"] == "A service that exists for the runtime tests."
    assert [(e["name"], e["subject"], e["queue_group"]) for e in info["endpoints"]] == [
        ("echo", SUBJECT, "q"),
        ("strict", STRICT_SUBJECT, "q"),
    ]
    endpoint = stats["endpoints"][0]
    assert (endpoint["num_requests"], endpoint["num_errors"]) == (4, 2)
    assert endpoint["last_error"].startswith("bad_request: the request is not a valid Echo")
    assert endpoint["data"] == {"in_flight": 0}
    assert endpoint["processing_time"] >= endpoint["average_processing_time"] > 0


async def test_a_request_in_flight_at_stop_is_answered_and_a_later_one_finds_no_responder(
    client: Client, bus_settings: BusSettings, harness: Harness
) -> None:
    service = harness.service()
    answers: list[Echoed] = []
    answered = anyio.Event()

    async def in_flight() -> None:
        answers.append(await request(client, SUBJECT, Echo(text="block"), Echoed, timeout_s=5))
        answered.set()

    async def release_once_stopping() -> None:
        # The endpoint stops taking requests first; only then may the blocked one finish.
        while True:
            try:
                # A short timeout: a probe the server routes to the just-drained subscription
                # is dropped, and waiting it out must not outlast the drain timeout.
                await request(client, SUBJECT, Echo(text="probe"), Echoed, timeout_s=0.5)
            except Unavailable:
                break
        harness.release.set()

    with anyio.fail_after(10):
        async with connect(bus_settings, "stopping") as nc, anyio.create_task_group() as tasks:
            async with service.running(nc, drain_timeout_s=5):
                tasks.start_soon(in_flight)
                await harness.started.wait()
                tasks.start_soon(release_once_stopping)
            await answered.wait()  # sent before `running` returned; received a moment later
            assert answers == [Echoed(text="released")]
            with pytest.raises(Unavailable, match="no service answers"):
                await request(client, SUBJECT, Echo(text="late"), Echoed, timeout_s=5)


async def test_requests_already_delivered_when_the_service_stops_are_all_answered(
    client: Client, bus_settings: BusSettings, harness: Harness
) -> None:
    """Stopping drains the endpoint: a burst the server already sent is not dropped."""
    service = harness.service()
    count = 200
    inbox = client.new_inbox()
    replies = await client.subscribe(inbox, max_msgs=count)
    with anyio.fail_after(10):
        async with connect(bus_settings, "stopping") as nc:
            async with service.running(nc, drain_timeout_s=5):
                await client.flush()
                for n in range(count):
                    await client.publish(SUBJECT, raw(Echo(text=str(n))), reply=inbox)
                await client.flush()
            answered = set()
            for _ in range(count):
                message = await replies.next_msg(timeout=5)
                if message.data:
                    answered.add(REPLY.decode(message.data).text)  # type: ignore[union-attr]
                else:  # nats-server's "no responders" (see `ask`): an answer, not silence
                    assert message.headers is not None
                    assert message.headers["Status"] == "503"
                    answered.add(f"503 #{len(answered)}")
    assert len(answered) == count


async def test_the_callers_trace_continues_into_the_service_span(
    client: Client, run_service: ServiceRunner, harness: Harness, spans: Spans
) -> None:
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            with tracer().start_as_current_span("agent turn") as root:
                await request(client, SUBJECT, Echo(text="traced"), Echoed, timeout_s=5)
            server = await spans.wait_for(f"process {SUBJECT}")
    sent = [s for s in spans.finished() if s.name == f"send {SUBJECT}"]
    [client_span] = sent
    assert client_span.context is not None and server.context is not None
    trace_id = root.get_span_context().trace_id
    assert client_span.context.trace_id == trace_id
    assert server.context.trace_id == trace_id
    assert server.parent is not None
    assert server.parent.span_id == client_span.context.span_id
    assert server.attributes is not None
    assert server.attributes["bastion.service"] == "testsvc"
    assert server.attributes["bastion.endpoint"] == "echo"
    # OpenTelemetry's messaging conventions: a PRODUCER `send`, a CONSUMER `process`.
    assert (client_span.kind, server.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    for span, operation in ((client_span, "send"), (server, "process")):
        assert span.attributes is not None
        assert span.attributes["messaging.system"] == "nats"
        assert span.attributes["messaging.operation.type"] == operation
        assert span.attributes["messaging.destination.name"] == SUBJECT
    assert "traceparent" in harness.seen[0].headers


RELAY = "bastion.v1.test.relay"


async def test_with_no_tracer_installed_a_callers_trace_context_still_goes_on_unchanged(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    @asynccontextmanager
    async def relay(bus: Client, _settings: BusSettings) -> AsyncIterator[Service]:
        async def handle(message: Echo, _: RequestContext) -> Echoed:
            answer: Echoed = await request(bus, SUBJECT, message, Echoed, timeout_s=5)
            return answer

        service = Service("relay", "1.0.0")
        service.add_endpoint("relay", RELAY, Echo, handle)
        yield service

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with anyio.fail_after(10):
        async with run_service(harness.setup()), run_service(relay):
            await client.flush()
            traced = await client.request(
                RELAY, raw(Echo(text="a")), timeout=5, headers={"traceparent": traceparent}
            )
            untraced = await client.request(RELAY, raw(Echo(text="b")), timeout=5)
    assert REPLY.decode(traced.data) == Echoed(text="a")
    assert REPLY.decode(untraced.data) == Echoed(text="b")
    assert [context.headers.get("traceparent") for context in harness.seen] == [traceparent, None]
