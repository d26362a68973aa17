"""Agents' tokens over the front door's HTTP API (`/v1/tokens`): the same profile, checks and
refusals as `bastion token create|list|revoke`, behind the operator's HTTP tokens. Real
services on a real NATS; the MCP SDK's client uses a token the API minted."""

from __future__ import annotations

from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from bastion.proto import subjects
from bastion.proto.frontdoor import CreateToken, ListTokens, TokenCreated, TokenList
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request
from bastion.shared.errors import BastionError
from tests.helpers.bus import Plane
from tests.helpers.front_door import DoorOf, mcp_client, new_token
from tests.helpers.owners import owned

OPERATOR = {"Authorization": "Bearer op-token-0123456789abcdef"}
"""The operator token of the `door_of` fixture's tokens file."""


def _operator(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers=OPERATOR, timeout=90)


def _problem(response: httpx.Response) -> tuple[int, str, str]:
    """The refusal's status, code and sentence, from the problem+json body it must be."""
    assert response.headers["content-type"] == "application/problem+json", response.text
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail", "code"}, body
    assert body["status"] == response.status_code
    assert body["title"] == HTTPStatus(response.status_code).phrase
    return response.status_code, body["code"], body["detail"]


async def _listed(bus: Bus) -> tuple[str, ...]:
    found: TokenList = await request(
        bus, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(), TokenList, timeout_s=10
    )
    return tuple(info.token_id for info in found.tokens)


async def test_a_token_created_over_http_is_the_clis_listed_without_its_secret_and_revoked(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    (skills / "hello").mkdir(parents=True)
    (skills / "hello" / "SKILL.md").write_text("---\nname: hello\n---\nSay hello.\n")
    profile: dict[str, Any] = {
        "agent": "claude",
        "tenant": "acme",
        "workspace": str(workspace),
        "shell": True,
        "network": "declared",
        "skills_dir": str(skills),
        "read_only_dirs": [str(owned(tmp_path / "shown"))],
        "limits": {"wall_s": 30.0},
        "ask": False,
        "skill_approvals": False,
    }
    async with plane_of(), door_of() as url, _operator(url) as http:
        created = await http.post("/v1/tokens", json=profile)
        assert created.status_code == 201, created.text
        answer = msgspec.json.decode(created.content, type=TokenCreated)
        async with mcp_client(url, answer.token) as mcp:
            tools = {t.name for t in (await mcp.list_tools()).tools}
        listed = await http.get("/v1/tokens", params={"tenant": "acme"})
        other_tenant = await http.get("/v1/tokens", params={"tenant": "globex"})
        revoked = await http.delete(f"/v1/tokens/{answer.info.token_id}")
        again = await http.delete(f"/v1/tokens/{answer.info.token_id}")
        after = await _listed(client)
    assert answer.token.startswith("bst_")
    expected = msgspec.convert(profile, CreateToken)
    assert {name: getattr(answer.info, name) for name in profile} == {
        name: getattr(expected, name) for name in profile
    }
    assert {"shell", "skill_read", "skill_run"} <= tools
    assert listed.status_code == 200, listed.text
    [item] = listed.json()["items"]
    assert item["token_id"] == answer.info.token_id and item["network"] == "declared"
    assert answer.token not in listed.text and "bst_" not in listed.text
    assert other_tenant.json() == {"items": []}
    assert revoked.status_code == 200, revoked.text
    assert revoked.json() == {
        "kind": "frontdoor.token_revoked",
        "token_id": answer.info.token_id,
        "agent": "claude",
        "tenant": "acme",
    }
    status, code, sentence = _problem(again)
    assert (status, code) == (404, "not_found")
    assert sentence.startswith(f"there is no token {answer.info.token_id}")
    assert after == ()


async def _bus_refusal(bus: Bus, ask: CreateToken) -> BastionError:
    with pytest.raises(BastionError) as refused:
        await request(bus, subjects.FRONTDOOR_TOKEN_CREATE, ask, TokenCreated, timeout_s=30)
    return refused.value


async def test_a_profile_the_bus_refuses_is_refused_over_http_with_the_same_sentence(
    client: Bus, plane_of: Plane, door_of: DoorOf, sandbox_state_dir: Path, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    (workspace / "skills").mkdir()
    profiles: list[tuple[dict[str, Any], int]] = [
        ({"workspace": str(owned(sandbox_state_dir / "agents-work"))}, 400),
        ({"workspace": str(workspace), "skills_dir": str(tmp_path / "no-such-skills")}, 400),
        ({"workspace": str(workspace), "skills_dir": str(workspace / "skills")}, 400),
        ({"shell": True}, 400),
        ({"workspace": "relative/dir"}, 400),
        ({"workspace": str(workspace), "mcp": ["notes"]}, 404),
    ]
    async with plane_of(), door_of() as url, _operator(url) as http:
        for profile, status in profiles:
            body = {"agent": "claude", **profile}
            over_bus = await _bus_refusal(client, msgspec.convert(body, CreateToken))
            over_http = await http.post("/v1/tokens", json=body)
            assert _problem(over_http) == (status, over_bus.code, over_bus.message), profile
        left = await _listed(client)
    assert left == ()


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"{not json", "malformed"),
        (b'{"agent": "claude", "shell": "yes"}', "$.shell"),
        (b'{"agent": "claude", "workspace_dir": "/tmp"}', "field the message does not have"),
        (b"{}", "agent"),
        (b'{"agent": "../x"}', "$.agent"),
        (b'{"agent": "claude", "workspace": "/tmp/a\\u0000b"}', "$.workspace"),
    ],
)
async def test_a_body_that_is_not_a_profile_is_refused_400_and_nothing_is_minted(
    client: Bus, plane_of: Plane, door_of: DoorOf, body: bytes, said: str
) -> None:
    async with plane_of(), door_of() as url, _operator(url) as http:
        refused = await http.post(
            "/v1/tokens", content=body, headers={"Content-Type": "application/json"}
        )
        left = await _listed(client)
    status, code, sentence = _problem(refused)
    assert (status, code) == (400, "bad_request") and said in sentence, sentence
    assert left == ()


async def test_a_malformed_id_or_query_is_400(door_of: DoorOf) -> None:
    async with door_of() as url, _operator(url) as http:
        malformed = await http.delete("/v1/tokens/NOT-AN-ID")
        unknown_query = await http.get("/v1/tokens", params={"tennant": "acme"})
        bad_tenant = await http.get("/v1/tokens", params={"tenant": "../acme"})
    assert _problem(malformed)[:2] == (400, "invalid_input")
    assert "is not a token id (16 hex digits)" in _problem(malformed)[2]
    assert "unknown query parameter 'tennant'" in _problem(unknown_query)[2]
    assert _problem(bad_tenant)[:2] == (400, "invalid_input")


async def test_an_agent_token_or_none_does_not_reach_the_token_routes(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    """An agent's bearer token opens MCP sessions; minting, listing and revoking tokens are
    the operator's, so with it (or with none) each route answers 401 and changes nothing."""
    async with plane_of(), door_of() as url:
        agent_token = await new_token(client, workspace)
        [token_id] = await _listed(client)
        answers = []
        for headers in ({"Authorization": f"Bearer {agent_token}"}, {}):
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
                answers += [
                    await http.post("/v1/tokens", json={"agent": "mallory"}),
                    await http.get("/v1/tokens"),
                    await http.delete(f"/v1/tokens/{token_id}"),
                ]
        left = await _listed(client)
    for answer in answers:
        assert _problem(answer)[:2] == (401, "unauthorized"), answer.text
        assert answer.headers["www-authenticate"] == "Bearer"
        assert agent_token not in answer.text
    assert left == (token_id,)


async def test_with_the_orchestrator_down_a_creation_is_503_and_mints_nothing(
    client: Bus, door_of: DoorOf, workspace: Path
) -> None:
    async with door_of() as url, _operator(url) as http:
        refused = await http.post(
            "/v1/tokens", json={"agent": "claude", "workspace": str(workspace)}
        )
        left = await _listed(client)
    status, code, sentence = _problem(refused)
    assert (status, code) == (503, "unavailable") and "session.check" in sentence, sentence
    assert left == ()
