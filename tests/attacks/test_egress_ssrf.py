"""SSRF attempts through the egress proxy and through fetch_url: each refused with its reason,
before any connection is tried (a network guard lists every connection off loopback)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from bastion.egress.service import egress_service
from bastion.proto import subjects
from bastion.proto.egress import GrantRecord
from bastion.shared.bus import Client
from bastion.shared.codec import encode
from bastion.shared.errors import RemoteError
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import (
    RESOLVER,
    SESSION,
    Egress,
    ask_proxy,
    basic,
    egress_settings,
    guard_network,
    web_server,
)

ATTEMPTS = [
    ("127.0.0.1", "loopback address 127.0.0.1"),
    ("10.0.0.1", "private address 10.0.0.1"),
    ("172.16.0.1", "private address 172.16.0.1"),
    ("192.168.1.1", "private address 192.168.1.1"),
    ("100.64.0.1", "shared (carrier-grade NAT) address 100.64.0.1"),
    ("169.254.169.254", "link-local (cloud metadata) address 169.254.169.254"),
    ("169.254.10.10", "link-local address 169.254.10.10"),
    ("0.0.0.0", "unspecified address 0.0.0.0"),
    ("224.0.0.1", "multicast address 224.0.0.1"),
    ("198.18.0.1", "benchmarking address 198.18.0.1"),
    ("240.0.0.1", "reserved address 240.0.0.1"),
    ("255.255.255.255", "broadcast address 255.255.255.255"),
    ("192.0.2.1", "documentation address 192.0.2.1"),
    ("[::1]", "loopback address ::1"),
    ("[::]", "unspecified address ::"),
    ("[fd00:ec2::254]", "private address fd00:ec2::254"),
    ("[fe80::1]", "link-local address fe80::1"),
    ("[ff02::1]", "multicast address ff02::1"),
    ("[2001:db8::1]", "documentation address 2001:db8::1"),
    ("[::ffff:127.0.0.1]", "loopback address 127.0.0.1 (embedded in ::ffff:7f00:1)"),
    ("[::ffff:169.254.169.254]", "link-local (cloud metadata) address 169.254.169.254"),
    ("[64:ff9b::7f00:1]", "loopback address 127.0.0.1 (embedded in 64:ff9b::7f00:1)"),
    ("[2002:7f00:1::1]", "loopback address 127.0.0.1 (embedded in 2002:7f00:1::1)"),
    ("[2001:0:4136:e378:8000:63bf:80ff:fffe]", "loopback address 127.0.0.1 (embedded in 2001:"),
    ("2130706433", "loopback address 127.0.0.1"),
    ("0177.0.0.1", "loopback address 127.0.0.1"),
    ("0x7f000001", "loopback address 127.0.0.1"),
    ("127.1", "loopback address 127.0.0.1"),
    ("017700000001", "loopback address 127.0.0.1"),
    ("internal.test", "private address 10.0.0.5"),
    ("metadata.test", "link-local (cloud metadata) address 169.254.169.254"),
    ("mixed.test", "private address 192.168.7.7"),
]


@pytest.fixture
async def egress(
    client: Client, run_service: ServiceRunner, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Egress]:
    """The egress service with the test resolver and no operator range."""
    off_loopback = guard_network(monkeypatch)
    async with run_service(egress_service(RESOLVER), egress_settings(nats_url)):
        yield Egress(client, off_loopback)
    assert off_loopback == []


@pytest.mark.parametrize(("host", "reason"), ATTEMPTS)
async def test_a_connect_to_a_refused_address_is_refused_with_its_reason(
    egress: Egress, host: str, reason: str
) -> None:
    grant = await egress.grant(any_public_host=True)
    auth = basic(grant.grant_id, grant.secret)
    answer = await ask_proxy(
        grant.proxy, f"CONNECT {host}:443 HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n"
    )
    assert answer.status == 403
    assert answer.headers["x-bastion-refused"].startswith(reason)
    assert reason in answer.body.decode()
    assert "refused: " + reason in await egress.connections(grant)


@pytest.mark.parametrize(("host", "reason"), ATTEMPTS)
async def test_fetch_url_of_a_refused_address_is_refused_with_its_reason(
    egress: Egress, host: str, reason: str
) -> None:
    with pytest.raises(RemoteError) as refused:
        await egress.fetch(f"http://{host}/latest/meta-data/")
    assert refused.value.code == "denied"
    assert reason in refused.value.message


async def test_a_plain_request_to_a_refused_address_is_refused_before_it_is_sent(
    egress: Egress,
) -> None:
    grant = await egress.grant(any_public_host=True)
    auth = basic(grant.grant_id, grant.secret)
    answer = await ask_proxy(
        grant.proxy,
        "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n"
        f"Host: 169.254.169.254\r\nProxy-Authorization: {auth}\r\n\r\n",
    )
    assert answer.status == 403
    assert "cloud metadata" in answer.headers["x-bastion-refused"]


async def test_a_host_header_for_another_site_is_refused(egress_loopback_allowed: Egress) -> None:
    egress = egress_loopback_allowed
    async with web_server() as server:
        grant = await egress.grant(f"public.test:{server.port}")
        auth = basic(grant.grant_id, grant.secret)
        answer = await ask_proxy(
            grant.proxy,
            f"GET http://public.test:{server.port}/ HTTP/1.1\r\n"
            f"Host: 169.254.169.254\r\nProxy-Authorization: {auth}\r\n\r\n",
        )
    assert answer.status == 403
    assert "the Host header names 169.254.169.254:80, another site" in answer.body.decode()
    assert server.seen == []


async def test_an_undeclared_host_and_an_undeclared_port_are_refused(
    egress_loopback_allowed: Egress,
) -> None:
    egress = egress_loopback_allowed
    grant = await egress.grant("public.test")
    auth = basic(grant.grant_id, grant.secret)
    for target, reason in (
        ("example.com:443", "not a declared host"),
        ("public.test:22", "port 22 is not declared for public.test"),
        ("public.test.evil:443", "not a declared host"),
    ):
        answer = await ask_proxy(
            grant.proxy, f"CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n"
        )
        assert (answer.status, answer.headers["x-bastion-refused"]) == (403, reason)
    assert await egress.connections(grant) == (
        "connections: example.com:443 refused: not a declared host; public.test:22 refused: "
        "port 22 is not declared for public.test; public.test.evil:443 refused: not a "
        "declared host"
    )


async def test_a_missing_unknown_forged_or_expired_grant_gets_407(egress: Egress) -> None:
    grant = await egress.grant(any_public_host=True)
    expired_id = "e" * 32
    js = egress.client.jetstream()
    kv = await js.key_value(subjects.EGRESS_GRANTS_BUCKET)
    await kv.put(
        expired_id,
        encode(
            GrantRecord(
                grant_id=expired_id,
                secret_sha256=hashlib.sha256(b"old-secret").hexdigest(),
                session_id=SESSION,
                tenant="acme",
                hosts=(),
                any_public_host=True,
                expires_at=datetime.now(UTC) - timedelta(seconds=1),
            )
        ),
    )
    cases = [
        ("", "without a grant"),
        ("Proxy-Authorization: Bearer abc\r\n", "not a grant"),
        (f"Proxy-Authorization: {basic('f' * 32, grant.secret)}\r\n", "unknown or has expired"),
        (f"Proxy-Authorization: {basic(grant.grant_id, 'forged')}\r\n", "secret is wrong"),
        (f"Proxy-Authorization: {basic(expired_id, 'old-secret')}\r\n", "unknown or has expired"),
    ]
    for header, sentence in cases:
        answer = await ask_proxy(grant.proxy, f"CONNECT example.com:443 HTTP/1.1\r\n{header}\r\n")
        assert answer.status == 407
        assert answer.headers["proxy-authenticate"].startswith("Basic")
        assert sentence in answer.body.decode()


async def test_a_redirect_to_a_private_or_metadata_address_is_refused_before_any_connect(
    egress_loopback_allowed: Egress,
) -> None:
    egress = egress_loopback_allowed
    async with web_server() as server:
        for path, reason in (
            ("/to-private", "10.0.0.1:80 refused: private address 10.0.0.1"),
            ("/to-metadata", "169.254.169.254:80 refused: link-local (cloud metadata)"),
        ):
            with pytest.raises(RemoteError) as refused:
                await egress.fetch(f"http://public.test:{server.port}{path}")
            assert refused.value.code == "denied"
            assert reason in refused.value.message
    assert [line for line, _ in server.seen] == [
        "GET /to-private HTTP/1.1",
        "GET /to-metadata HTTP/1.1",
    ]
