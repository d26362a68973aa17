"""`web_search` and keeping cut pages: providers asked as configured, through the checked
path, offered only when configured and with `web`; loopback servers only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bastion.cli.up import env_for
from bastion.egress.providers import provider_from
from bastion.egress.service import egress_service, keep_chars
from bastion.egress.settings import EgressSettings
from bastion.orchestrator.catalogue import catalogue_for
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.egress import SearchRequest, SearchResults
from bastion.proto.errors import ErrorReply
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.errors import InvalidInput, RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import RESOLVER, guard_network
from tests.helpers.search import LONG_PAGE, fake_provider
from tests.helpers.session import call, open_session

SESSION = "0123456789abcdef"
KEYS = {"BRAVE_SEARCH_API_KEY": "brave-test-key", "TAVILY_API_KEY": "tavily-test-key"}


def _egress(nats_url: str, search: str, port: int, allow: str = "127.0.0.0/8") -> EgressSettings:
    base = f"http://public.test:{port}"
    return EgressSettings(
        nats_url=nats_url,
        egress_allow_ranges=allow,
        egress_fetch_max_chars=100,
        search=search,
        egress_brave_url=base,
        egress_tavily_url=base,
    )


async def _search(client: Client, **fields: object) -> SearchResults:
    ask = SearchRequest(session_id=SESSION, tenant="acme", query="bastion egress", **fields)  # type: ignore[arg-type]
    results: SearchResults = await request(
        client, subjects.EGRESS_SEARCH, ask, SearchResults, timeout_s=15
    )
    return results


@pytest.mark.parametrize("kind", ["searxng", "brave", "tavily"])
async def test_each_provider_is_asked_with_count_and_freshness(
    client: Client,
    run_service: ServiceRunner,
    nats_url: str,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off_loopback = guard_network(monkeypatch)
    async with fake_provider() as fake:
        spec = f"searxng:http://public.test:{fake.port}" if kind == "searxng" else kind
        async with run_service(egress_service(RESOLVER, KEYS), _egress(nats_url, spec, fake.port)):
            results = await _search(client, count=3, freshness="week")
    assert results.provider == kind
    assert [(h.title, h.url, h.snippet) for h in results.hits] == [
        (f"Result {n}", f"https://r{n}.example/", f"about & {n}") for n in (1, 2, 3)
    ]
    (asked,) = fake.asked
    if kind == "searxng":
        assert (asked.method, asked.path) == ("GET", "/search")
        assert asked.query == {"q": ["bastion egress"], "format": ["json"], "time_range": ["week"]}
    elif kind == "brave":
        assert (asked.method, asked.path) == ("GET", "/res/v1/web/search")
        assert asked.query == {"q": ["bastion egress"], "count": ["3"], "freshness": ["pw"]}
        assert asked.headers["x-subscription-token"] == "brave-test-key"
    else:
        assert (asked.method, asked.path) == ("POST", "/search")
        assert json.loads(asked.body) == {
            "api_key": "tavily-test-key",
            "query": "bastion egress",
            "max_results": 3,
            "time_range": "week",
        }
    assert off_loopback == []


@pytest.mark.parametrize(
    ("host", "reason"),
    [("internal.test", "private address 10.0.0.5"), ("public.test", "loopback address 127.0.0.1")],
)
async def test_a_provider_on_a_private_address_is_refused_unless_allowed(
    client: Client,
    run_service: ServiceRunner,
    nats_url: str,
    host: str,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off_loopback = guard_network(monkeypatch)
    async with fake_provider() as fake:
        spec = f"searxng:http://{host}:{fake.port}"
        async with run_service(
            egress_service(RESOLVER, {}), _egress(nats_url, spec, fake.port, allow="")
        ):
            with pytest.raises(RemoteError) as refused:
                await _search(client)
    assert refused.value.code == "denied"
    assert reason in str(refused.value)
    assert fake.asked == []
    assert off_loopback == []


def test_a_provider_needs_its_url_or_its_key() -> None:
    assert provider_from("", {}, "b", "t") is None
    for spec, words in [
        ("brave", "needs BRAVE_SEARCH_API_KEY"),
        ("tavily", "needs TAVILY_API_KEY"),
        ("searxng", "needs its URL"),
        ("bing", "is not a provider"),
    ]:
        with pytest.raises(InvalidInput, match=words):
            provider_from(spec, {}, "b", "t")


def test_web_search_is_offered_only_with_web_and_a_provider() -> None:
    def names(**kw: bool) -> list[str]:
        return [t.name for t in catalogue_for(workspace=None, shell=False, network="none", **kw)]

    assert names(web=True, search=True) == ["fetch_url", "web_search"]
    assert names(web=True, search=False) == ["fetch_url"]
    assert names(web=False, search=True) == []


async def test_web_search_through_the_plane_is_a_numbered_list_and_taints(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off_loopback = guard_network(monkeypatch)
    async with fake_provider() as fake:
        spec = f"searxng:http://public.test:{fake.port}"
        async with (
            run_service(policy_service, PolicySettings),
            run_service(
                orchestrator_service,
                OrchestratorSettings(nats_url=bus_settings.nats_url, search=spec),
            ),
            run_service(
                egress_service(RESOLVER, {}), _egress(bus_settings.nats_url, spec, fake.port)
            ),
        ):
            plain = await open_session(client, autonomy="L5")
            web = await open_session(client, autonomy="L5", web=True)
            found = await call(client, web.session_id, "web_search", query="bastion", count=2)
            too_many = await call(client, web.session_id, "web_search", query="x", count=11)
            after: SessionInfo = await request(
                client,
                subjects.SESSION_GET,
                SessionRef(session_id=web.session_id),
                SessionInfo,
                timeout_s=10,
            )
    assert [t.name for t in plain.tools] == []
    assert [(t.name, t.effect) for t in web.tools] == [
        ("fetch_url", "external"),
        ("web_search", "external"),
    ]
    assert isinstance(found, ToolOutput)
    assert found.text == (
        "2 result(s) for 'bastion':\n"
        "1. Result 1\n   https://r1.example/\n   about & 1\n"
        "2. Result 2\n   https://r2.example/\n   about & 2"
    )
    assert isinstance(too_many, ErrorReply)
    assert after.tainted_until is not None
    assert off_loopback == []


async def test_a_cut_page_is_kept_whole_in_the_workspace_and_read_with_read_file(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    guard_network(monkeypatch)
    async with fake_provider() as fake:
        url = f"http://public.test:{fake.port}/long"
        async with (
            run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
            run_service(
                egress_service(RESOLVER, {}), _egress(bus_settings.nats_url, "", fake.port)
            ),
        ):
            with_ws = await open_session(client, autonomy="L5", web=True, workspace=str(workspace))
            fetched = await call(client, with_ws.session_id, "fetch_url", url=url, format="text")
            assert isinstance(fetched, ToolOutput)
            kept = re.search(r"is in (\.bastion/fetched/[0-9a-f]{16}\.txt); read it", fetched.text)
            assert kept, fetched.text
            read = await call(client, with_ws.session_id, "read_file", path=kept.group(1))
            bare = await open_session(client, autonomy="L5", web=True)
            not_kept = await call(client, bare.session_id, "fetch_url", url=url, format="text")
    assert f"the whole page ({len(LONG_PAGE)} characters)" in fetched.text
    assert (workspace / kept.group(1)).read_text() == LONG_PAGE
    assert isinstance(read, ToolOutput) and "line 399 of a long page" in read.text
    assert isinstance(not_kept, ToolOutput)
    assert "the rest was not kept (this session has no workspace)" in not_kept.text


def test_bastion_up_gives_a_search_key_to_the_egress_service_only() -> None:
    env = {"PATH": "/bin", "BRAVE_SEARCH_API_KEY": "k", "BASTION_VAULT_MASTER_KEY": "m"}
    assert env_for("egress", env) == {"PATH": "/bin", "BRAVE_SEARCH_API_KEY": "k"}
    assert env_for("vault", env) == {"PATH": "/bin", "BASTION_VAULT_MASTER_KEY": "m"}
    assert env_for("sandbox", env) == env_for("nats", env) == {"PATH": "/bin"}


def test_the_kept_text_fits_the_bus_message() -> None:
    settings = EgressSettings()
    assert keep_chars(settings, 8 * 1024 * 1024) == 1_000_000
    assert keep_chars(settings, 1024 * 1024) == (1024 * 1024 - 16 * 1024) // 4 - 100_000
    assert keep_chars(settings, 64 * 1024) == 0
