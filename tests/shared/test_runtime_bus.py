"""The typed request helper and `connect`: every failure is one of Bastion's errors."""

from __future__ import annotations

import secrets

import anyio
import anyio.abc
import nats.aio.subscription
import nats.js.errors
import pytest
from nats.js.api import StorageType, StreamConfig

from bastion.cli.natsserver import free_port
from bastion.proto import subjects
from bastion.proto.policy import PolicyDecision
from bastion.shared.bus import Client, connect, request, round_trip, send_stored
from bastion.shared.errors import BadRequest, NoResponders, Timeout, Unavailable
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.runtime import SUBJECT, Echo, Echoed, Harness


async def test_a_request_nobody_serves_raises_unavailable_not_timeout(client: Client) -> None:
    with anyio.fail_after(10), pytest.raises(Unavailable) as raised:
        await request(client, "bastion.v1.nobody.home", Echo(text="hi"), Echoed, timeout_s=5)
    assert type(raised.value) is NoResponders  # an Unavailable, never a Timeout
    assert raised.value.code == "unavailable"
    assert "no service answers on bastion.v1.nobody.home" in raised.value.message


async def test_a_handler_that_never_answers_in_time_raises_timeout(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            with pytest.raises(Timeout) as raised:
                await request(client, SUBJECT, Echo(text="block"), Echoed, timeout_s=0.2)
            harness.release.set()  # so the service's drain does not wait
    assert raised.value.code == "timeout"
    assert raised.value.message.startswith(f"no answer on {SUBJECT} within 0.2 s: ")


@pytest.mark.parametrize(
    ("subject", "service"),
    [
        (subjects.SESSION_OPEN, "the orchestrator service"),
        (subjects.POLICY_DECIDE, "the policy service"),
        (subjects.FRONTDOOR_TOKEN_REVOKE, "the mcp service"),
        (subjects.VAULT_LEASE, "the vault service"),
    ],
)
async def test_a_time_out_names_the_service_to_check_not_only_the_subject(
    client: Client, subject: str, service: str
) -> None:
    sub = await client.subscribe(subject)  # takes the request and never answers
    await round_trip(client)
    with pytest.raises(Timeout) as raised:
        await request(client, subject, Echo(text="x"), Echoed, timeout_s=0.2)
    await sub.unsubscribe()
    assert f"{service} took the request but did not answer in time" in raised.value.message
    assert "`bastion status`" in raised.value.message


async def test_a_stored_message_is_acknowledged_later_with_its_sequence_or_its_refusal(
    client: Client,
) -> None:
    name = f"test_stored_{secrets.token_hex(4)}"
    js = client.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY))
    expecting = "Nats-Expected-Last-Subject-Sequence"
    with anyio.fail_after(10):
        # sent one after another, acknowledged afterwards, in any order
        first = await send_stored(client, f"{name}.a", b"one", timeout_s=5)
        second = await send_stored(
            client, f"{name}.a", b"two", headers={expecting: "1"}, timeout_s=5
        )
        late = await send_stored(
            client, f"{name}.a", b"late", headers={expecting: "1"}, timeout_s=5
        )
        nowhere = await send_stored(client, "test_stored_nowhere.a", b"", timeout_s=5)
        assert await second.sequence() == 2
        assert await first.sequence() == 1
        with pytest.raises(nats.js.errors.APIError) as refused:
            await late.sequence()
        assert refused.value.err_code in (10071, 10164)  # the compare-and-set lost
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await nowhere.sequence()
    kept = await js.get_msg(name, 2)
    assert kept.data == b"two" and kept.headers == {expecting: "1"}


async def test_answers_past_a_subscriptions_pending_bytes_limit_all_arrive(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    # each answer is handed over as it is read: none stays counted as pending, so the
    # client's answer subscription never takes itself for a slow consumer and drops one
    harness.huge_bytes = 512 * 1024
    limit = nats.aio.subscription.DEFAULT_SUB_PENDING_BYTES_LIMIT
    with anyio.fail_after(60):
        async with run_service(harness.setup()):
            for _ in range(limit // harness.huge_bytes + 8):
                answer = await request(client, SUBJECT, Echo(text="huge"), Echoed, timeout_s=5)
                assert len(answer.text) == harness.huge_bytes


async def test_a_reply_of_another_type_raises_bad_request(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    with anyio.fail_after(10):
        async with run_service(harness.setup()):
            with pytest.raises(BadRequest, match="PolicyDecision"):
                await request(client, SUBJECT, Echo(text="hi"), PolicyDecision, timeout_s=5)


async def test_a_request_on_a_closed_connection_raises_unavailable(
    bus_settings: BusSettings,
) -> None:
    with anyio.fail_after(10):
        async with connect(bus_settings, "short-lived") as nc:
            await nc.close()
            with pytest.raises(Unavailable, match="closed"):
                await request(nc, SUBJECT, Echo(text="hi"), Echoed, timeout_s=1)


async def test_connecting_to_a_server_that_is_not_there_says_how_to_start_one() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with anyio.fail_after(10), pytest.raises(Unavailable) as raised:
        async with connect(BusSettings(nats_url=url), "nobody"):
            pass
    assert raised.value.message.startswith(f"cannot reach NATS at {url}")
    assert "bastion up" in raised.value.message


async def test_a_round_trip_comes_after_a_subscription_still_in_the_clients_buffer(
    nats_url: str,
) -> None:
    """What the server reads from a client, recorded by a relay between them: when
    `round_trip` returns, the server has read the SUB and, after it, the PING it answered.
    A single `flush()` of nats-py writes its PING ahead of the SUB, so another connection's
    message could reach the server before the subscription did."""
    server_port = int(nats_url.rsplit(":", 1)[1])
    read_by_server = bytearray()

    async def relay(downstream: anyio.abc.SocketStream) -> None:
        async with downstream, await anyio.connect_tcp("127.0.0.1", server_port) as upstream:

            async def pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
                async for chunk in source:
                    if source is downstream:
                        read_by_server.extend(chunk)
                    await sink.send(chunk)

            async with anyio.create_task_group() as pumps:
                pumps.start_soon(pump, upstream, downstream)
                await pump(downstream, upstream)
                pumps.cancel_scope.cancel()

    relay_port = free_port()
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=relay_port) as relays,
        anyio.create_task_group() as relaying,
    ):
        relaying.start_soon(relays.serve, relay)
        settings = BusSettings(nats_url=f"nats://127.0.0.1:{relay_port}", request_timeout_s=10.0)
        async with connect(settings, "recorded") as recorded:
            await recorded.subscribe("bastion.v1.test.heard")
            await round_trip(recorded)
            seen = bytes(read_by_server)
        relaying.cancel_scope.cancel()
    assert b"SUB bastion.v1.test.heard" in seen
    assert seen.rindex(b"PING") > seen.index(b"SUB bastion.v1.test.heard")
