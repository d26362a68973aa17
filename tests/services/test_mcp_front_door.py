"""The MCP front door at /mcp: the SDK's own client against real services on a real NATS."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import httpx2
import mcp.client.session
import msgspec
import pytest
from mcp.shared.exceptions import MCPError

from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.proto.events import SessionClosed
from bastion.proto.frontdoor import ListTokens, RevokeToken, TokenList, TokenRevoked
from bastion.proto.mcp import ElicitAnswer, ElicitQuestion
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request
from bastion.shared.codec import decode
from bastion.shared.errors import Unavailable
from tests.helpers.approvals import answer, pending
from tests.helpers.bus import Plane
from tests.helpers.front_door import Asked, DoorOf, mcp_client, new_token, read_json, text_of
from tests.helpers.owners import owned
from tests.helpers.session import session_of


class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer without stickiness: each request goes to the next front door."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = ports
        self._next = 0
        self._inner = httpx2.AsyncHTTPTransport()
        self.served: list[int] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = self._ports[self._next % len(self._ports)]
        self._next += 1
        self.served.append(port)
        request.url = request.url.copy_with(port=port)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_an_agent_with_a_token_lists_its_tools_and_runs_shell_and_write_file(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, mode: str, version: str
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, mode) as mcp:
            listed = await mcp.list_tools()
            wrote = await mcp.call_tool("write_file", {"path": "hello.txt", "content": "hi MCP\n"})
            ran = await mcp.call_tool("shell", {"command": "cat hello.txt; id -u"})
            negotiated = mcp.protocol_version
    assert negotiated == version
    tools = {t.name: t for t in listed.tools}
    assert {"shell", "write_file", "read_file", "edit_file"} <= set(tools)
    read_file = tools["read_file"].annotations
    assert read_file is not None and read_file.read_only_hint is True
    write = tools["write_file"].annotations
    assert write is not None and write.read_only_hint is False and write.destructive_hint is True
    shell_schema = tools["shell"].input_schema
    assert shell_schema["type"] == "object" and shell_schema["required"] == ["command"]
    assert set(shell_schema["properties"]) == {"command", "timeout_s"}
    assert set(tools["write_file"].input_schema["required"]) == {"path", "content"}
    assert not wrote.is_error and text_of(wrote) == "wrote 7 bytes to hello.txt"
    assert not ran.is_error and "hi MCP" in text_of(ran)
    assert (workspace / "hello.txt").read_text() == "hi MCP\n"


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18"])
async def test_a_client_asking_for_an_older_protocol_gets_it_and_lists_and_calls_tools(
    client: Bus,
    plane_of: Plane,
    door_of: DoorOf,
    workspace: Path,
    version: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The SDK's client always asks for its newest handshake version; an older client asks
    # for its own, as this one now does.
    monkeypatch.setattr(mcp.client.session, "LATEST_HANDSHAKE_VERSION", version)
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, "legacy") as mcp_session:
            listed = await mcp_session.list_tools()
            ran = await mcp_session.call_tool("shell", {"command": "echo older"})
            negotiated = mcp_session.protocol_version
    assert negotiated == version
    assert {"shell", "write_file", "read_file"} <= {t.name for t in listed.tools}
    assert not ran.is_error and "older" in text_of(ran)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_call_that_asks_is_put_to_the_person_by_elicitation_and_runs_once_approved(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, mode: str
) -> None:
    approve = Asked({"decision": "approve"})
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L2")
        async with mcp_client(url, token, mode, elicit=approve) as mcp:
            wrote = await mcp.call_tool("write_file", {"path": "README.md", "content": "ok"})
            again = await mcp.call_tool("read_file", {"path": "README.md"})
    assert not wrote.is_error, text_of(wrote)
    assert text_of(wrote) == "wrote 2 bytes to README.md"
    assert (workspace / "README.md").read_text() == "ok"
    [asked] = approve.messages
    assert "write_file" in asked and '"path": "README.md"' in asked
    assert not again.is_error and "ok" in text_of(again)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_decline_through_elicitation_is_a_tool_error_with_the_reason(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, mode: str
) -> None:
    decline = Asked({"decision": "decline", "reason": "not the README"})
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L2")
        async with mcp_client(url, token, mode, elicit=decline) as mcp:
            refused = await mcp.call_tool("write_file", {"path": "README.md", "content": "no"})
    assert refused.is_error
    assert text_of(refused) == (
        "declined: a person (mcp:claude) declined this call: not the README"
    )
    assert not (workspace / "README.md").exists()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_without_elicitation_waits_a_while_then_is_told_how_to_approve(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, mode: str
) -> None:
    async with plane_of(), door_of(mcp_approval_wait_s=0.5) as url:
        token = await new_token(client, workspace, autonomy="L2")
        async with mcp_client(url, token, mode) as mcp:
            waiting = await mcp.call_tool("write_file", {"path": "README.md", "content": "x"})
    assert waiting.is_error
    text = text_of(waiting)
    assert text.startswith("waiting_for_approval: write_file waits for a person's approval")
    assert "Nobody answered within 0.5 s" in text
    assert "bastion agent continue " in text and "--approve" in text
    assert "POST /v1/approvals/" in text
    assert not (workspace / "README.md").exists()


async def test_a_person_answering_elsewhere_during_the_wait_gives_the_call_its_result(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    audit = await client.subscribe(subjects.AUDIT_ALL)

    async def approve_when_parked() -> None:
        with anyio.fail_after(20):
            while True:
                record = decode((await audit.next_msg(timeout=20)).data, AuditRecord)
                if (record.action, record.outcome) == ("approval", "parked"):
                    break
        [parked] = (await pending(client)).approvals
        await answer(client, parked.request_id, approve=True)

    async with plane_of(), door_of(mcp_approval_wait_s=30) as url:
        token = await new_token(client, workspace, autonomy="L2")
        async with mcp_client(url, token) as mcp, anyio.create_task_group() as person:
            person.start_soon(approve_when_parked)
            wrote = await mcp.call_tool("write_file", {"path": "README.md", "content": "yes"})
    await audit.unsubscribe()
    assert not wrote.is_error and text_of(wrote) == "wrote 3 bytes to README.md"


async def test_requests_without_a_live_token_or_from_a_foreign_origin_or_host_are_refused(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream"}
    async with plane_of(), door_of() as url, httpx2.AsyncClient(base_url=url) as http:
        token = await new_token(client, workspace)
        none = await http.post("/mcp", json=ping, headers=headers)
        unknown = await http.post(
            "/mcp", json=ping, headers={**headers, "Authorization": "Bearer bst_nope"}
        )
        good = {**headers, "Authorization": f"Bearer {token}"}
        origin = await http.post(
            "/mcp", json=ping, headers={**good, "Origin": "https://evil.example"}
        )
        host = await http.post("/mcp", json=ping, headers={**good, "Host": "evil.example:80"})
        async with mcp_client(url, token) as mcp:
            await mcp.list_tools()
            [info] = (await request_tokens(client)).tokens
            revoked: TokenRevoked = await request(
                client,
                subjects.FRONTDOOR_TOKEN_REVOKE,
                RevokeToken(token_id=info.token_id),
                TokenRevoked,
                timeout_s=10,
            )
            with pytest.raises(MCPError) as after_revoke:
                await mcp.list_tools()
        gone = await http.post("/mcp", json=ping, headers=good)
    assert none.status_code == 401 and none.headers["www-authenticate"].startswith("Bearer")
    body = none.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert "bastion token create --agent NAME" in body["error"]["message"]
    assert unknown.status_code == 401 and "unknown or was revoked" in unknown.text
    assert origin.status_code == 403 and body["error"]["code"] == -32600
    assert host.status_code == 421
    assert revoked.agent == "claude"
    assert "401" in str(after_revoke.value) or "revoked" in str(after_revoke.value)
    assert gone.status_code == 401 and "unknown or was revoked" in gone.text


async def request_tokens(bus: Bus) -> TokenList:
    listed: TokenList = await request(
        bus, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(), TokenList, timeout_s=10
    )
    return listed


async def test_a_session_begun_on_one_front_door_is_served_by_another_on_the_same_nats(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as first, door_of() as second:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        ports = [int(first.rsplit(":", 1)[1]), int(second.rsplit(":", 1)[1])]
        balancer = RoundRobin(ports)
        async with mcp_client(first, token, "legacy", transport=balancer) as mcp:
            listed = await mcp.list_tools()
            wrote = await mcp.call_tool("write_file", {"path": "a.txt", "content": "one"})
            ran = await mcp.call_tool("shell", {"command": "cat a.txt"})
            [session] = (await read_json(mcp, "bastion://sessions"))["sessions"]
    assert set(balancer.served) == set(ports)
    assert "shell" in {t.name for t in listed.tools}
    assert not wrote.is_error and not ran.is_error and text_of(ran).endswith("\none")
    assert session["calls"] == 2


async def test_delete_closes_the_bastion_session_and_its_transcript_stays_readable(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3")
        async with mcp_client(url, token) as mcp:
            await mcp.call_tool("write_file", {"path": "t.txt", "content": "secret-ish"})
            [listed] = (await read_json(mcp, "bastion://sessions"))["sessions"]
            sid = listed["session_id"]
            assert listed["state"] == "open"
        closed = await session_of(client, sid)
        async with mcp_client(url, token) as later:
            transcript = await read_json(later, f"bastion://sessions/{sid}")
            resources = await later.list_resources()
    assert closed.state == "closed"
    assert transcript["session"]["state"] == "closed"
    records = transcript["records"]
    actions = [(r["action"], r.get("tool", ""), r.get("outcome", "")) for r in records]
    assert ("decision", "write_file", "allow") in actions
    assert ("result", "write_file", "ok") in actions
    assert "secret-ish" not in msgspec.json.encode(transcript).decode()
    assert "bastion://sessions" in {str(r.uri) for r in resources.resources}


async def test_a_long_call_reports_progress_and_relays_an_upstream_question_to_the_person(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    person = Asked({"folder": "notes"})
    progress: list[str] = []

    async def on_progress(_done: float, _total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def ask_during_the_call(session_id: str) -> ElicitAnswer:
        question = ElicitQuestion(
            session_id=session_id,
            server="notes",
            message="Which folder?",
            schema_json='{"type":"object","properties":{"folder":{"type":"string"}}}',
        )
        with anyio.fail_after(20):
            while True:  # until the front door subscribes, as the call starts
                try:
                    answered: ElicitAnswer = await request(
                        client, subjects.mcp_elicit(session_id), question, ElicitAnswer,
                        timeout_s=20,
                    )  # fmt: skip
                except Unavailable:
                    continue
                return answered

    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, elicit=person) as mcp:
            await mcp.list_tools()
            [session] = (await read_json(mcp, "bastion://sessions"))["sessions"]
            async with anyio.create_task_group() as running:
                running.start_soon(
                    partial(mcp.call_tool, progress_callback=on_progress),
                    "shell",
                    {"command": "sleep 2.5"},
                )
                answer_of_person = await ask_during_the_call(session["session_id"])
    assert answer_of_person == ElicitAnswer(action="accept", content={"folder": "notes"})
    assert person.messages == ["The MCP server notes asks: Which folder?"]
    assert progress and progress[0] == "shell runs (2 s)"


async def test_stateless_requests_share_one_session_per_token_closed_when_it_is_revoked(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3")
        async with mcp_client(url, token, "auto") as first:
            await first.call_tool("write_file", {"path": "a.txt", "content": "1"})
        async with mcp_client(url, token, "auto") as second:
            await second.call_tool("write_file", {"path": "b.txt", "content": "2"})
            [session] = (await read_json(second, "bastion://sessions"))["sessions"]
        [info] = (await request_tokens(client)).tokens
        await request(
            client,
            subjects.FRONTDOOR_TOKEN_REVOKE,
            RevokeToken(token_id=info.token_id),
            TokenRevoked,
            timeout_s=10,
        )
        closed = await session_of(client, session["session_id"])
    assert session["calls"] == 2
    assert closed.state == "closed"


async def test_an_mcp_session_left_idle_ends_and_closes_its_bastion_session(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    closing = await client.subscribe(subjects.event("session_closed", "default"))
    async with plane_of(), door_of(mcp_session_idle_s=0.5) as url:
        token = await new_token(client, workspace)
        async with mcp_client(url, token, delete_on_exit=False) as mcp:
            await mcp.list_tools()
            [session] = (await read_json(mcp, "bastion://sessions"))["sessions"]
        # the client left without DELETE: no request in flight, no stream open
        closed_event = decode((await closing.next_msg(timeout=20)).data, SessionClosed)
        closed = await session_of(client, session["session_id"])
    await closing.unsubscribe()
    assert closed_event.session_id == session["session_id"] == closed.session_id
    assert closed.state == "closed"


async def test_a_stateless_call_with_a_request_state_it_was_not_given_is_invalid_params(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L2")
        async with mcp_client(url, token, "auto", elicit=Asked(None)) as mcp:
            with pytest.raises(MCPError) as refused:
                await mcp.call_tool(
                    "write_file",
                    {"path": "x", "content": "y"},
                    request_state="approval:0123456789abcdef",
                )
    assert refused.value.error.code == -32602
    assert "not one of an approval of this session" in refused.value.error.message
    assert not (workspace / "x").exists()


async def test_run_code_at_the_front_door_reads_fifty_files_and_is_refused_a_write(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    for n in range(50):
        (workspace / f"f{n:02}.txt").write_text(f"line {n}\n")
    (workspace / "keep.txt").write_text("kept\n")
    owned(workspace)
    count = (
        "paths = [p for p in tools.find_files(pattern='f*.txt').split() if p.endswith('.txt')]\n"
        "print(len(paths), sum('line' in tools.read_file(path=p) for p in paths))\n"
    )
    write = (
        "try:\n"
        "    tools.write_file(path='keep.txt', content='lost')\n"
        "except ToolError as error:\n"
        "    print(error.message)\n"
    )
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, "auto") as mcp:
            listed = await mcp.list_tools()
            counted = await mcp.call_tool("run_code", {"code": count})
            refused = await mcp.call_tool("run_code", {"code": write})
            failed = await mcp.call_tool("run_code", {"code": "raise ValueError('no')"})
    run_code = {t.name: t for t in listed.tools}["run_code"]
    assert run_code.input_schema["required"] == ["code"]
    assert not counted.is_error and text_of(counted) == "50 50\n"
    assert not refused.is_error
    assert text_of(refused) == (
        "run_code calls only tools that read; make the write_file call yourself\n"
    )
    assert (workspace / "keep.txt").read_text() == "kept\n"
    assert failed.is_error and text_of(failed).endswith("ValueError: no")


async def test_a_tools_own_failures_are_results_the_model_reads_in_plain_words(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    """A file that is not there, a path holding a NUL and an argument the tool does not take
    are the tool's answers (`isError`, a sentence naming what to change), not JSON-RPC
    errors naming Bastion's internal messages."""
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3")
        async with mcp_client(url, token, "auto") as mcp:
            missing = await mcp.call_tool("read_file", {"path": "nope.txt"})
            nul = {
                tool: await mcp.call_tool(tool, {"path": "a\x00b", **extra})
                for tool, extra in (("read_file", {}), ("write_file", {"content": "x"}))
            }
            listed_nul = await mcp.call_tool("list_files", {"path": "a\x00b"})
            extra = await mcp.call_tool("read_file", {"path": "nope.txt", "bogus": 1})
    assert missing.is_error and "there is no file nope.txt" in text_of(missing)
    for result in (*nul.values(), listed_nul):
        assert result.is_error, text_of(result)
        assert "a path without a NUL character" in text_of(result)
        assert "ResolvePaths" not in text_of(result) and "regex" not in text_of(result)
    assert extra.is_error and "does not have: `bogus`" in text_of(extra)
    assert not (workspace / "a").exists()
