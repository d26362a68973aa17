"""The egress service's allowed paths, against a server the test starts on loopback (allowed
by an operator range for these tests only): tunnels, plain requests, fetch_url, the record."""

from __future__ import annotations

import ssl

import anyio
import pytest

from bastion.egress.dial import Dialer
from bastion.egress.pinned import Hop, pinned_request
from bastion.egress.resolver import FixedResolver
from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.errors import InvalidInput, RemoteError
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import RESOLVER, Egress, ask_proxy, basic, web_server


async def test_a_tunnel_to_a_declared_host_reaches_it_and_is_recorded(
    egress_loopback_allowed: Egress,
) -> None:
    egress = egress_loopback_allowed
    async with web_server() as server:
        grant = await egress.grant(f"public.test:{server.port}")
        auth = basic(grant.grant_id, grant.secret)
        answer = await ask_proxy(
            grant.proxy,
            f"CONNECT public.test:{server.port} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            keep_open=True,
        )
        assert answer.status == 200 and answer.stream is not None
        async with answer.stream as tunnel:
            await tunnel.send(b"GET /plain HTTP/1.1\r\nHost: public.test\r\n\r\n")
            data = b""
            with anyio.fail_after(10):
                while b"just text" not in data:
                    data += await tunnel.receive()
        refused = await ask_proxy(
            grant.proxy, f"CONNECT example.com:443 HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n"
        )
    assert refused.status == 403
    assert server.seen == [("GET /plain HTTP/1.1", "public.test")]
    assert await egress.connections(grant) == (
        f"connections: public.test:{server.port} allowed; "
        "example.com:443 refused: not a declared host"
    )


async def test_a_plain_request_is_sent_in_origin_form_without_the_grant(
    egress_loopback_allowed: Egress,
) -> None:
    egress = egress_loopback_allowed
    async with web_server() as server:
        grant = await egress.grant(f"*.test:{server.port}")
        auth = basic(grant.grant_id, grant.secret)
        answer = await ask_proxy(
            grant.proxy,
            f"GET http://public.test:{server.port}/plain HTTP/1.1\r\n"
            f"Host: public.test:{server.port}\r\nProxy-Authorization: {auth}\r\n\r\n",
        )
    assert answer.status == 200
    assert answer.body == b"just text\n"
    assert server.seen == [("GET /plain HTTP/1.1", f"public.test:{server.port}")]


async def test_fetch_url_reads_a_page_as_markdown_without_its_scripts(
    egress_loopback_allowed: Egress,
) -> None:
    egress = egress_loopback_allowed
    async with web_server() as server:
        page = await egress.fetch(f"http://public.test:{server.port}/")
        text = await egress.fetch(f"http://public.test:{server.port}/", fmt="text")
        html = await egress.fetch(f"http://public.test:{server.port}/", fmt="html")
    assert page.status == 200
    assert "# Loopback page" in page.text
    assert "Hello [next](/next)" in page.text
    assert "evil" not in page.text and "evil" not in text.text
    assert "Loopback page" in text.text and "#" not in text.text
    assert "<script>" in html.text


async def test_fetch_url_follows_a_redirect_checking_each_hop_and_records_them(
    egress_loopback_allowed: Egress,
) -> None:
    egress = egress_loopback_allowed
    async with web_server() as server:
        page = await egress.fetch(f"http://public.test:{server.port}/to-plain")
        with pytest.raises(RemoteError, match="redirects more than 5 times"):
            await egress.fetch(f"http://public.test:{server.port}/loop")
    assert page.text == "just text\n"
    assert page.redirects == (f"http://public.test:{server.port}/plain",)
    js = egress.client.jetstream()
    sub = await js.subscribe(subjects.audit("acme", "0123456789abcdef"), ordered_consumer=True)
    record = decode((await sub.next_msg(timeout=5)).data, AuditRecord)
    await sub.unsubscribe()
    assert (record.action, record.tool, record.outcome) == ("egress", "fetch_url", "allowed")
    assert record.summary == f"public.test:{server.port} allowed"


async def test_fetch_url_refuses_what_is_not_text_with_a_sentence(
    egress_loopback_allowed: Egress,
) -> None:
    async with web_server() as server:
        with pytest.raises(RemoteError) as refused:
            await egress_loopback_allowed.fetch(f"http://public.test:{server.port}/binary")
    assert refused.value.code == "invalid_input"
    assert "is image/png, not text" in refused.value.message


async def test_a_grant_names_the_advertised_proxy_address_when_one_is_set(
    client: Client, run_service: ServiceRunner, nats_url: str
) -> None:
    settings = EgressSettings(
        nats_url=nats_url, egress_listen="127.0.0.1:0", egress_advertise="egress:3128"
    )
    async with run_service(egress_service(RESOLVER), settings):
        grant = await Egress(client, []).grant("example.com:443")
    assert grant.proxy == "egress:3128"


async def test_a_request_to_a_url_whose_port_is_no_port_is_invalid_input_before_any_dial() -> None:
    hops: list[Hop] = []
    for url in ("http://public.test:port/", "https://public.test:99999/"):
        with pytest.raises(InvalidInput, match="names a port that is not one"):
            await pinned_request(
                Dialer(resolver=FixedResolver({"public.test": ["127.0.0.1"]})),
                ssl.create_default_context(),
                url,
                headers=[],
                max_bytes=1024,
                hops=hops,
            )
    assert hops == []
