"""A `tools/call` POSTed again at the front door never runs twice, an id still in flight is
refused without taking the first POST's answer, and a result names its call id. Raw
Streamable HTTP (the SDK's client never sends an id twice) and the SDK's client, against
real services on a real NATS."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from nats.aio.msg import Msg

from bastion.mcp.frontdoor.callids import call_id_of
from bastion.mcp.frontdoor.inflight import request_id
from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import round_trip
from bastion.shared.codec import decode
from tests.helpers.approvals import pending
from tests.helpers.bus import Plane
from tests.helpers.front_door import (
    DoorOf,
    answer_in,
    mcp_client,
    new_token,
    raw_session,
    text_of,
)

OPERATOR = {"Authorization": "Bearer op-token-0123456789abcdef"}
"""The `door_of` fixture's operator token."""
COUNT = "echo x >> counter.txt; wc -l < counter.txt"
GATED = f"while [ ! -e go ]; do sleep 0.05; done; {COUNT}"
"""Appends once `go` exists: a call that runs until the test lets it end."""
CALL_ID = re.compile(r"[0-9a-f]{16}")


def text(result: dict[str, Any]) -> str:
    [content] = result["content"]
    value: str = content["text"]
    return value


def let_go(workspace: Path) -> None:
    """Let the GATED commands end."""
    gate = workspace / "go"
    gate.touch()
    os.chown(gate, 1000, 1000)


def lines(workspace: Path) -> list[str]:
    return (workspace / "counter.txt").read_text().splitlines()


async def test_a_tools_call_posted_again_with_its_id_is_answered_from_its_one_run(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with raw_session(url, token) as raw:
            first = await raw.answer(7, COUNT)
            again = await raw.answer(7, COUNT)
    assert not first["isError"] and text(first).strip().endswith("1"), text(first)
    assert text(again) == text(first) and not again["isError"]
    assert lines(workspace) == ["x"]
    assert CALL_ID.fullmatch(first["_meta"]["bastion/call_id"])
    assert again["_meta"] == first["_meta"]


async def test_a_call_whose_stream_was_cut_sent_again_waits_for_its_first_run(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with raw_session(url, token) as raw:
            async with raw.http.stream("POST", "/mcp", json=raw.call(8, GATED)) as cut:
                assert cut.status_code == 200
            # the first POST's stream is gone; its command still waits for `go`
            with anyio.fail_after(30):
                while True:
                    async with raw.http.stream("POST", "/mcp", json=raw.call(8, GATED)) as retry:
                        if retry.status_code == 409:  # the cut not yet seen by the front door
                            await retry.aread()
                            await anyio.sleep(0.05)
                            continue
                        let_go(workspace)
                        answered = answer_in((await retry.aread()).decode(), 8)
                        break
    assert not answered["isError"] and text(answered).strip().endswith("1"), text(answered)
    assert lines(workspace) == ["x"]


async def test_a_second_post_of_an_id_in_flight_is_refused_and_the_first_gets_its_answer(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with raw_session(url, token) as raw:
            async with raw.http.stream("POST", "/mcp", json=raw.call(9, GATED)) as first:
                assert first.status_code == 200
                duplicate = await raw.http.post("/mcp", json=raw.call(9, GATED))
                let_go(workspace)
                answered = answer_in((await first.aread()).decode(), 9)
            after = await raw.answer(10, "cat counter.txt")
    assert duplicate.status_code == 409
    refusal = duplicate.json()
    assert refusal["id"] is None and refusal["error"]["data"] == {"code": "conflict"}
    assert refusal["error"]["message"].startswith(
        "request id 9 is still being answered in this MCP session: wait for the answer on "
        "the POST that sent it"
    )
    assert not answered["isError"] and text(answered).strip().endswith("1"), text(answered)
    assert lines(workspace) == ["x"] and text(after).strip().endswith("x")


async def test_a_request_id_reused_for_another_call_is_a_new_call(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with raw_session(url, token) as raw:
            first = await raw.answer(11, "echo a >> counter.txt")
            other = await raw.answer(11, "echo b >> counter.txt")
    assert lines(workspace) == ["a", "b"]
    assert first["_meta"]["bastion/call_id"] != other["_meta"]["bastion/call_id"]
    assert first["_meta"]["bastion/session_id"] == other["_meta"]["bastion/session_id"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_results_call_id_is_the_audits_and_the_cancel_routes(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, mode: str
) -> None:
    results: list[AuditRecord] = []

    async def seen(msg: Msg) -> None:
        record = decode(msg.data, AuditRecord)
        if record.action == "result" and record.tool == "shell":
            results.append(record)

    await client.subscribe(subjects.AUDIT_ALL, cb=seen)
    await round_trip(client)
    async with plane_of(), door_of() as url, httpx2.AsyncClient(base_url=url) as http:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, mode) as mcp:
            ran = await mcp.call_tool("shell", {"command": "echo hi"})
            assert ran.meta is not None
            sid, call_id = ran.meta["bastion/session_id"], ran.meta["bastion/call_id"]
            ended = await http.post(f"/v1/sessions/{sid}/calls/{call_id}/cancel", headers=OPERATOR)
            unknown = await http.post(
                f"/v1/sessions/{sid}/calls/{'0' * 16}/cancel", headers=OPERATOR
            )
    assert not ran.is_error and "hi" in text_of(ran)
    [record] = results
    assert (record.session_id, record.call_id) == (sid, call_id)
    assert CALL_ID.fullmatch(call_id)
    assert ended.status_code == 200 and ended.json()["outcome"] == "ended", ended.text
    assert unknown.status_code == 404


async def test_an_error_result_names_its_call_id_too(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of(mcp_approval_wait_s=0.2) as url:
        token = await new_token(client, workspace, autonomy="L2")
        async with mcp_client(url, token) as mcp:
            waiting = await mcp.call_tool("write_file", {"path": "a.txt", "content": "x"})
            [parked] = (await pending(client)).approvals
    assert waiting.is_error and text_of(waiting).startswith("waiting_for_approval:")
    assert waiting.meta == {
        "bastion/session_id": parked.session_id,
        "bastion/call_id": parked.call_id,
    }


def test_a_call_id_names_the_session_the_request_id_the_tool_and_its_arguments() -> None:
    one = call_id_of("s1", 7, "shell", {"command": "ls", "timeout_s": 5})
    assert CALL_ID.fullmatch(one)
    assert call_id_of("s1", 7, "shell", {"timeout_s": 5, "command": "ls"}) == one
    others = [
        call_id_of("s2", 7, "shell", {"command": "ls", "timeout_s": 5}),
        call_id_of("s1", 8, "shell", {"command": "ls", "timeout_s": 5}),
        call_id_of("s1", "7", "shell", {"command": "ls", "timeout_s": 5}),
        call_id_of("s1", 7, "run_tests", {"command": "ls", "timeout_s": 5}),
        call_id_of("s1", 7, "shell", {"command": "ls"}),
    ]
    assert one not in others and len(set(others)) == len(others)
    stateless = {call_id_of(None, 7, "shell", {"command": "ls"}) for _ in range(3)}
    assert len(stateless) == 3 and all(CALL_ID.fullmatch(c) for c in stateless)


def test_a_bodys_request_id_is_read_as_the_sdk_keys_it_or_the_body_is_refused() -> None:
    assert request_id(b'{"jsonrpc": "2.0", "id": 5, "method": "ping"}') == "5"
    assert request_id(b'{"jsonrpc": "2.0", "id": "b", "method": "ping", "params": {}}') == "b"
    assert request_id(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}') == ""
    assert request_id(b'{"jsonrpc": "2.0", "id": 3, "result": {}}') == ""
    unreadable = [
        b"not json",
        b'{"id": 6, "method": "ping", "params": {"n": NaN}}',  # the SDK's parser takes NaN
        b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]',  # a batch
        b'{"method": 5, "id": 10, "method": "tools/call"}',  # the SDK keeps the last key
        b'{"id": "' + b"x" * 600 + b'", "method": "ping"}',
        b'{"id": 7, "method": "ping", "params": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ]
    for body in unreadable:
        assert request_id(body) is None, body[:60]
