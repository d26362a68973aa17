"""The front door's HTTP API: approvals listed and answered over HTTP, through real services."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import httpx
import msgspec
import pytest
from opentelemetry.trace import SpanKind

from bastion.cli.natsserver import free_port
from bastion.mcp.frontdoor.httperrors import response_of
from bastion.mcp.frontdoor.httpsettings import UnsafeListen
from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.proto.approvals import ApprovalAnswered, ApprovalList
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import CallParked, ToolOutput
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError, RemoteError, Unavailable
from bastion.shared.httptokens import UnsafeTokensFile
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import pending
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.session import call, open_session, session_of
from tests.helpers.tracing import Spans, span_ancestry

TOKEN = "s3cret-token-for-alice-0123456789"


@dataclass
class Door:
    """A running front door: its base URL and a client holding a good token."""

    url: str
    http: httpx.AsyncClient

    def without_token(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30)


DoorOf = Callable[..., AbstractAsyncContextManager[Door]]


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "http-tokens"
    path.write_text(f"# who may answer approvals\nalice:{TOKEN}\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def door_of(run_service: ServiceRunner, bus_settings: BusSettings, tokens_file: Path) -> DoorOf:
    """The mcp service with its front door on a free loopback port, and a client for it."""

    @asynccontextmanager
    async def running(**settings: str) -> AsyncIterator[Door]:
        port = free_port()
        mcp = McpSettings(
            nats_url=bus_settings.nats_url,
            http_listen=f"127.0.0.1:{port}",
            http_tokens_file=str(tokens_file),
            **settings,  # type: ignore[arg-type]
        )
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            run_service(mcp_service, mcp),
            httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http,
        ):
            yield Door(url, http)

    return running


def error_of(response: httpx.Response) -> tuple[str, str]:
    """The refusal's code and sentence, from the RFC 9457 problem+json body it must be."""
    assert response.headers["content-type"] == "application/problem+json", response.headers
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail", "code"}, body
    assert body["status"] == response.status_code
    assert body["type"] == f"urn:bastion:error:{body['code']}"
    assert body["title"] == HTTPStatus(response.status_code).phrase
    assert "Traceback" not in response.text
    return body["code"], body["detail"]


async def parked_write(client: Client, workspace: Path, **session: object) -> tuple[str, str]:
    """A session whose write waits for a person: its id and the request's."""
    opened = await open_session(client, workspace=str(workspace), **session)
    parked = await call(client, opened.session_id, "write_file", path="README.md", content="x")
    assert isinstance(parked, CallParked)
    [entry] = (await pending(client, opened.session_id)).approvals
    assert parked.request_id == entry.request_id
    return opened.session_id, entry.request_id


async def test_a_call_listed_over_http_and_approved_runs_once_and_a_second_answer_is_409(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as door:
        sid, rid = await parked_write(client, workspace)
        listed = await door.http.get("/v1/approvals", params={"session": sid})
        approved = await door.http.post(f"/v1/approvals/{rid}", json={"approve": True})
        again = await door.http.post(f"/v1/approvals/{rid}", json={"approve": True})
        after = await door.http.get("/v1/approvals", params={"session": sid})
        every = await door.http.get("/v1/approvals", params={"session": sid, "all": "true"})
        waits = await session_of(client, sid)
    assert listed.status_code == 200, listed.text
    [entry] = msgspec.json.decode(listed.content, type=ApprovalList).approvals
    assert entry.request_id == rid and entry.tool == "write_file" and entry.state == "pending"
    assert approved.status_code == 200, approved.text
    answered = msgspec.json.decode(approved.content, type=ApprovalAnswered)
    assert answered.approval.state == "done" and answered.approval.answered_by == "http:alice"
    assert isinstance(answered.result, ToolOutput)
    assert answered.result.text == "wrote 1 bytes to README.md"
    assert (workspace / "README.md").read_text() == "x"
    assert again.status_code == 409
    code, message = error_of(again)
    assert code == "conflict" and "already answered by http:alice" in message
    assert msgspec.json.decode(after.content, type=ApprovalList).approvals == ()
    [done] = msgspec.json.decode(every.content, type=ApprovalList).approvals
    assert done.state == "done" and waits.waiting_for == ""


async def test_an_answer_over_http_continues_the_callers_traceparent_down_to_the_approved_run(
    client: Client,
    plane_of: Plane,
    door_of: DoorOf,
    workspace: Path,
    spans: Spans,
) -> None:
    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    async with plane_of(), door_of() as door:
        _, rid = await parked_write(client, workspace)
        approved = await door.http.post(
            f"/v1/approvals/{rid}",
            json={"approve": True},
            headers={"traceparent": f"00-{trace_id}-{span_id}-01"},
        )
    assert approved.status_code == 200, approved.text
    finished = spans.finished()
    [route] = [s for s in finished if s.name == "POST /v1/approvals/{request_id}"]
    assert route.kind == SpanKind.SERVER and route.parent is not None
    assert format(route.context.trace_id, "032x") == trace_id  # type: ignore[union-attr]
    assert format(route.parent.span_id, "016x") == span_id
    assert route.attributes is not None and route.attributes["http.response.status_code"] == 200
    [run] = [s for s in finished if s.name == "orchestrator.approved_run"]
    assert span_ancestry(finished, run)[-3:] == [
        "process bastion.v1.approvals.answer",
        "send bastion.v1.approvals.answer",
        "POST /v1/approvals/{request_id}",
    ]


async def test_a_decline_over_http_carries_its_reason_and_the_call_never_runs(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as door:
        _sid, rid = await parked_write(client, workspace)
        declined = await door.http.post(
            f"/v1/approvals/{rid}", json={"approve": False, "reason": "not the README"}
        )
    assert declined.status_code == 200, declined.text
    answered = msgspec.json.decode(declined.content, type=ApprovalAnswered)
    assert answered.approval.state == "declined" and answered.approval.answer == "not the README"
    assert isinstance(answered.result, ErrorReply) and answered.result.code == "declined"
    assert answered.result.message == "a person (http:alice) declined this call: not the README"
    assert not (workspace / "README.md").exists()


async def test_always_with_a_rule_over_http_lets_similar_calls_run_without_asking(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as door:
        sid, rid = await parked_write(client, workspace)
        approved = await door.http.post(
            f"/v1/approvals/{rid}",
            json={"approve": True, "always": True, "rule": "write_file(*.md)"},
        )
        next_one = await call(client, sid, "write_file", path="NOTES.md", content="y")
    assert approved.status_code == 200, approved.text
    answered = msgspec.json.decode(approved.content, type=ApprovalAnswered)
    assert answered.approval.rule == "write_file(*.md)"
    assert isinstance(next_one, ToolOutput), next_one
    assert (workspace / "NOTES.md").read_text() == "y"


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-token-0123456789abcdef", f"Basic {TOKEN}", "Bearer"]
)
async def test_without_the_right_token_the_api_answers_401_and_nothing_is_answered(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    async with plane_of(), door_of() as door, door.without_token() as anonymous:
        sid, rid = await parked_write(client, workspace)
        listed = await anonymous.get("/v1/approvals", headers=headers)
        answered = await anonymous.post(
            f"/v1/approvals/{rid}", json={"approve": True}, headers=headers
        )
        still = await pending(client, sid)
    for response in (listed, answered):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        code, message = error_of(response)
        assert code == "unauthorized" and "token" in message
        assert TOKEN not in response.text
    assert [p.request_id for p in still.approvals] == [rid]
    assert not (workspace / "README.md").exists()


async def test_a_request_from_an_origin_not_allowed_is_refused_403_and_an_allowed_one_passes(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of(http_origins="https://ops.example.org") as door:
        sid, rid = await parked_write(client, workspace)
        evil = {"Origin": "http://evil.example"}
        listed = await door.http.get("/v1/approvals", headers=evil)
        answered = await door.http.post(
            f"/v1/approvals/{rid}", json={"approve": True}, headers=evil
        )
        still = await pending(client, sid)
        allowed = await door.http.get(
            "/v1/approvals", headers={"Origin": "https://ops.example.org"}
        )
    for response in (listed, answered):
        assert response.status_code == 403
        code, message = error_of(response)
        assert code == "forbidden_origin" and "BASTION_HTTP_ORIGINS" in message
    assert [p.request_id for p in still.approvals] == [rid]
    assert allowed.status_code == 200


async def test_with_no_origins_allowed_any_request_carrying_an_origin_is_refused(
    door_of: DoorOf,
) -> None:
    async with door_of() as door:
        local = await door.http.get("/v1/approvals", headers={"Origin": "http://127.0.0.1:8787"})
    assert local.status_code == 403


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"{not json", "malformed"),
        (b'{"approve": "yes"}', "$.approve"),
        (b'{"approve": true, "extra": 1}', "field the message does not have"),
        (b"{}", "approve"),
        (b'{"approve": false, "always": true}', '"always" and "rule" go with'),
        (b'{"approve": true, "reason": "why"}', '"reason" goes with'),
    ],
)
async def test_a_body_that_is_not_an_answer_is_refused_400_saying_why(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path, body: bytes, said: str
) -> None:
    async with plane_of(), door_of() as door:
        sid, rid = await parked_write(client, workspace)
        refused = await door.http.post(
            f"/v1/approvals/{rid}", content=body, headers={"Content-Type": "application/json"}
        )
        still = await pending(client, sid)
    assert refused.status_code == 400, refused.text
    _code, message = error_of(refused)
    assert said in message
    assert [p.request_id for p in still.approvals] == [rid]


async def test_an_unknown_request_is_404_and_a_malformed_id_or_query_is_400(
    plane_of: Plane, door_of: DoorOf
) -> None:
    async with plane_of(), door_of() as door:
        unknown = await door.http.post("/v1/approvals/0123456789abcdef", json={"approve": True})
        malformed = await door.http.post("/v1/approvals/NOT-AN-ID", json={"approve": True})
        bad_query = await door.http.get("/v1/approvals", params={"sesion": "x"})
        bad_all = await door.http.get("/v1/approvals", params={"all": "maybe"})
        no_route = await door.http.get("/v1/nothing")
    assert unknown.status_code == 404
    code, message = error_of(unknown)
    assert code == "not_found" and "there is no approval request 0123456789abcdef" in message
    assert malformed.status_code == 400 and "16 lowercase hex" in error_of(malformed)[1]
    assert bad_query.status_code == 400 and "unknown query parameter" in error_of(bad_query)[1]
    assert bad_all.status_code == 400
    assert no_route.status_code == 404 and error_of(no_route)[0] == "not_found"


async def test_a_body_over_the_bound_is_refused_413(door_of: DoorOf) -> None:
    async with door_of() as door:
        refused = await door.http.post(
            "/v1/approvals/0123456789abcdef",
            content=b'{"approve": false, "reason": "' + b"x" * 70_000 + b'"}',
        )
    assert refused.status_code == 413 and error_of(refused)[0] == "too_large"


async def test_with_no_orchestrator_the_api_answers_503_saying_so(door_of: DoorOf) -> None:
    async with door_of() as door:
        listed = await door.http.get("/v1/approvals")
        answered = await door.http.post("/v1/approvals/0123456789abcdef", json={"approve": True})
    for response in (listed, answered):
        assert response.status_code == 503
        code, message = error_of(response)
        assert code == "unavailable" and message.startswith("the orchestrator does not answer")


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RemoteError("denied", "the policy refuses writes outside the workspace"), 403),
        (RemoteError("rate_limited", "over 20 calls per second: retry in 1 s"), 429),
        (RemoteError("quota_exceeded", "8 open sessions: close one"), 429),
        (RemoteError("unknown_tool", "no tool named shel"), 404),
        (RemoteError("invalid_input", "not 16 lowercase hex digits"), 400),
        (RemoteError("a_code_of_a_newer_service", "something new"), 502),
        (Unavailable("no service answers"), 503),
    ],
)
def test_a_services_error_is_a_problem_detail_with_the_status_its_code_means(
    error: BastionError, status: int
) -> None:
    answer = response_of(error)
    response = httpx.Response(answer.status_code, headers=answer.headers, content=answer.body)
    assert response.status_code == status
    assert error_of(response) == (error.code, error.message)


async def test_livez_answers_and_readyz_says_ready_while_nats_is_connected(
    door_of: DoorOf,
) -> None:
    async with door_of() as door, door.without_token() as probe:
        live = await probe.get("/livez")
        ready = await probe.get("/readyz")
    assert live.status_code == 200 and ready.status_code == 200


@pytest.fixture
def readable_tokens_file(tokens_file: Path) -> Path:
    tokens_file.chmod(0o644)
    return tokens_file


async def test_the_service_refuses_to_start_with_a_tokens_file_others_can_read(
    client: Client, door_of: DoorOf, readable_tokens_file: Path
) -> None:
    with pytest.raises(UnsafeTokensFile) as refused:
        async with door_of():
            pass
    assert f"chmod 600 {readable_tokens_file}" in refused.value.message


async def test_the_service_refuses_a_non_loopback_address_without_tokens(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    mcp = McpSettings(
        nats_url=bus_settings.nats_url,
        http_listen="0.0.0.0:0",
        http_tokens_file=str(tmp_path / "none"),
    )
    with pytest.raises(UnsafeListen) as refused:
        async with run_service(mcp_service, mcp):
            pass
    assert "not a loopback address, with no token configured" in refused.value.message
