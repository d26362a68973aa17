"""`fetch_url` through the whole plane: offered only with `web`, external, and tainting."""

from __future__ import annotations

import pytest

from bastion.egress.service import egress_service
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import RESOLVER, egress_settings, guard_network, web_server
from tests.helpers.session import call, open_session


async def test_fetch_url_is_offered_with_web_only_and_taints_the_session(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off_loopback = guard_network(monkeypatch)
    orchestrator_settings = OrchestratorSettings(nats_url=bus_settings.nats_url)
    async with (
        run_service(policy_service, PolicySettings),
        run_service(orchestrator_service, orchestrator_settings),
        run_service(
            egress_service(RESOLVER), egress_settings(bus_settings.nats_url, "127.0.0.0/8")
        ),
        web_server() as server,
    ):
        plain = await open_session(client, autonomy="L5")
        web = await open_session(client, autonomy="L5", web=True)
        fetched = await call(
            client, web.session_id, "fetch_url", url=f"http://public.test:{server.port}/"
        )
        refused = await call(client, web.session_id, "fetch_url", url="http://10.0.0.1/")
        after: SessionInfo = await request(
            client,
            subjects.SESSION_GET,
            SessionRef(session_id=web.session_id),
            SessionInfo,
            timeout_s=10,
        )
    assert [t.name for t in plain.tools] == []
    assert [(t.name, t.effect) for t in web.tools] == [("fetch_url", "external")]
    assert isinstance(fetched, ToolOutput)
    assert fetched.text.startswith(f"http://public.test:{server.port}/ (200, text/html")
    assert "# Loopback page" in fetched.text
    assert isinstance(refused, ErrorReply) and refused.code == "denied"
    assert "private address 10.0.0.1" in refused.message
    assert after.tainted_until is not None
    assert off_loopback == []
