"""Upstream MCP servers through the whole plane: added and pinned, offered to a session as
`<server>_<tool>`, called; then changed, and what changed withheld until reviewed again.

The server is the example notes server, written with the official SDK, run over stdio in
bubblewrap (its virtual environment shown read-only) — the peer is the real SDK.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec
import pytest
from opentelemetry.trace import SpanKind

from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.mcp import AddServer, McpReview, McpServerSpec, ReviewServer
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.keyfiles import read_x25519_key
from bastion.shared.sealing import public_bytes
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.conftest import ServiceRunner
from tests.owners import owned
from tests.services.mcp_upstream_helpers import (
    NOTES,
    PYTHON_DIRS,
    SERVERS,
    sandboxed_python,
    serving_http,
    stdio_spec,
)
from tests.services.test_orchestrator import call, open_session
from tests.services.vaulthelp import add as add_secret
from tests.services.vaulthelp import key_file, vault_settings
from tests.shared.conftest import Spans, span_ancestry, spans  # noqa: F401  (the fixture)

NOTES_SERVER = NOTES


def notes_spec(directory: Path, **fields: object) -> McpServerSpec:
    """The notes server over stdio in bwrap, its program and virtual environment shown."""
    values: dict[str, object] = {
        "transport": "stdio",
        "command": sandboxed_python(NOTES_SERVER),
        "directory": str(directory),
        "read_only_dirs": (*PYTHON_DIRS, str(NOTES_SERVER.parent)),
    }
    return McpServerSpec(**(values | fields))  # type: ignore[arg-type]


@asynccontextmanager
async def plane(
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    state_dir: Path,
    *,
    pin_recheck_s: float | None = None,
) -> AsyncIterator[None]:
    mcp = McpSettings(
        nats_url=bus_settings.nats_url, http_listen="127.0.0.1:0", state_dir=str(state_dir)
    )
    if pin_recheck_s is not None:
        mcp = msgspec.structs.replace(mcp, mcp_pin_recheck_s=pin_recheck_s)
    async with (
        run_service(policy_service, PolicySettings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        run_service(mcp_service, mcp),
    ):
        yield


async def add(client: Client, name: str, spec: McpServerSpec) -> McpReview:
    review: McpReview = await request(
        client, subjects.MCP_ADD, AddServer(name=name, spec=spec), McpReview, timeout_s=60
    )
    return review


async def review(client: Client, name: str, *, accept: bool = False) -> McpReview:
    found: McpReview = await request(
        client,
        subjects.MCP_REVIEW,
        ReviewServer(name=name, accept=accept),
        McpReview,
        timeout_s=60,
    )
    return found


def text_of(result: object) -> str:
    assert isinstance(result, ToolOutput), result
    return result.text


async def test_a_notes_server_is_added_pinned_offered_and_called_then_changes_are_withheld(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    notes = owned(tmp_path / "notes")
    async with plane(run_service, bus_settings, tmp_path / "state"):
        added = await add(client, "notes", notes_spec(notes))
        session = await open_session(client, autonomy="L3", mcp=["notes"])
        kept = await call(
            client,
            session.session_id,
            "notes_add_note",
            name="release",
            text="Ship the shell and MCP tools on Friday.",
        )
        listed = await call(client, session.session_id, "notes_list_notes")
        read = await call(client, session.session_id, "notes_read_note", name="release")
        resources = await call(client, session.session_id, "notes_resources")
        resource = await call(
            client, session.session_id, "notes_read_resource", uri="note://release"
        )
        tainted: SessionInfo = await request(
            client,
            subjects.SESSION_GET,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=10,
        )

        (notes / "revision").write_text("changed")
        changed = await open_session(client, autonomy="L3", mcp=["notes"])
        withheld = await call(client, changed.session_id, "notes_add_note", name="x", text="y")
        still = await call(client, changed.session_id, "notes_read_note", name="release")
        looked = await review(client, "notes")
        accepted = await review(client, "notes", accept=True)
        after = await open_session(client, autonomy="L3", mcp=["notes"])

    assert added.pinned
    assert {t.name: t.effect for t in added.tools} == {
        "list_notes": "read",
        "read_note": "read",
        "add_note": "write",
        "delete_note": "write",
    }
    offered = {t.name: t for t in session.tools}
    assert {"notes_add_note", "notes_list_notes", "notes_read_note", "notes_delete_note"} <= set(
        offered
    )
    assert offered["notes_read_note"].effect == "read"
    assert session.notices == ()
    assert "release" in text_of(kept)
    assert "release" in text_of(listed)
    assert "Ship the shell and MCP tools on Friday." in text_of(read)
    assert "note://{name}" in text_of(resources)
    assert text_of(resource) == "Ship the shell and MCP tools on Friday."
    assert offered["notes_resources"].taints and offered["notes_read_resource"].taints
    assert tainted.tainted_until is not None  # what a resource says comes from outside

    assert "notes_add_note" not in {t.name for t in changed.tools}
    assert "notes_export_notes" not in {t.name for t in changed.tools}
    assert any(
        "export_notes is new" in n and "bastion mcp review notes" in n for n in changed.notices
    )
    assert any("add_note changed" in n for n in changed.notices)
    assert isinstance(withheld, ErrorReply) and withheld.code == "unknown_tool"
    assert "Ship the shell" in text_of(still)

    statuses = {t.name: t.status for t in looked.tools}
    assert statuses["export_notes"] == "new"
    assert statuses["add_note"] == "changed"
    assert statuses["read_note"] == "unchanged"
    assert not looked.pinned
    assert accepted.pinned
    assert {"notes_add_note", "notes_export_notes"} <= {t.name for t in after.tools}
    assert after.notices == ()


async def test_an_upstream_call_is_a_client_span_under_the_mcp_services_span(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    spans: Spans,  # noqa: F811
) -> None:
    notes = owned(tmp_path / "notes")
    async with plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "notes", notes_spec(notes))
        session = await open_session(client, autonomy="L3", mcp=["notes"])
        listed = await call(client, session.session_id, "notes_list_notes")
    assert isinstance(listed, ToolOutput), listed
    finished = spans.finished()
    [upstream] = [s for s in finished if s.name == "mcp.upstream.call"]
    assert upstream.kind == SpanKind.CLIENT
    assert upstream.attributes is not None
    assert upstream.attributes["bastion.mcp.server"] == "notes"
    assert upstream.attributes["bastion.tool"] == "list_notes"
    ancestry = span_ancestry(finished, upstream)
    assert ancestry[:2] == ["bastion.mcp.call", f"send {subjects.MCP_CALL}"]
    assert ancestry[-2:] == ["bastion.orchestrator.call", "send bastion.v1.session.*.call"]


async def test_a_notes_server_over_streamable_http_is_pinned_called_and_its_changes_withheld(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    notes = owned(tmp_path / "notes")
    async with plane(run_service, bus_settings, tmp_path / "state"):
        async with serving_http(NOTES, notes, "--http") as port:
            url = f"http://127.0.0.1:{port}/mcp"
            added = await add(client, "notes", McpServerSpec(transport="http", url=url))
            session = await open_session(client, autonomy="L3", mcp=["notes"])
            kept = await call(
                client, session.session_id, "notes_add_note", name="groceries", text="rice"
            )
            read = await call(client, session.session_id, "notes_read_note", name="groceries")
        (notes / "revision").write_text("changed")
        async with serving_http(NOTES, notes, "--http", port):
            changed = await open_session(client, autonomy="L3", mcp=["notes"])
            await review(client, "notes", accept=True)
            after = await open_session(client, autonomy="L3", mcp=["notes"])
    assert added.pinned and added.protocol
    assert "groceries" in text_of(kept)
    assert text_of(read) == "rice"
    assert "notes_add_note" not in {t.name for t in changed.tools}
    assert any("export_notes is new" in n for n in changed.notices)
    assert {"notes_add_note", "notes_export_notes"} <= {t.name for t in after.tools}


async def test_a_tool_changed_after_the_session_started_is_not_called(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """The pin is checked again at call time, on the live connection: with the tools listed
    before every call (a bound of 0), a server that changes a tool between two calls on the
    same connection, without saying so, does not get the second."""
    async with plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=0):
        await add(client, "shifty", stdio_spec(SERVERS / "misbehaving.py", tmp_path))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        before = await call(client, session.session_id, "shifty_target", text="a")
        await call(client, session.session_id, "shifty_shift")
        refused = await call(client, session.session_id, "shifty_target", text="b")
        got: SessionInfo = await request(
            client,
            subjects.SESSION_GET,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=10,
        )
    assert text_of(before) == "kept a"
    assert isinstance(refused, ErrorReply), refused
    assert refused.code == "tool_changed"
    assert "changed target since this session was offered it" in refused.message
    assert "bastion mcp review shifty" in refused.message
    assert got.calls == 3


def _refused_as_changed(result: object) -> None:
    assert isinstance(result, ErrorReply), result
    assert result.code == "tool_changed"
    assert "changed target since this session was offered it" in result.message


async def test_a_tool_changed_with_a_notice_is_not_called_once_the_notice_is_read(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """With a bound no test outlives, only the server's change event makes the gateway list
    again: from the first call after it is read, the changed tool is refused."""
    async with plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=3600):
        await add(client, "shifty", stdio_spec(SERVERS / "misbehaving.py", tmp_path))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        before = await call(client, session.session_id, "shifty_target", text="a")
        await call(client, session.session_id, "shifty_shift_loudly")
        for _ in range(200):  # the event may be read after the call's answer: bounded
            after = await call(client, session.session_id, "shifty_target", text="b")
            if not isinstance(after, ToolOutput):
                break
            await anyio.sleep(0.05)
    assert text_of(before) == "kept a"
    _refused_as_changed(after)


async def test_a_tool_changed_silently_is_not_called_once_the_bound_has_passed(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    async with plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=0.2):
        await add(client, "shifty", stdio_spec(SERVERS / "misbehaving.py", tmp_path))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        await call(client, session.session_id, "shifty_shift")
        await anyio.sleep(0.3)
        refused = await call(client, session.session_id, "shifty_target", text="b")
    _refused_as_changed(refused)


async def test_a_tool_changed_before_a_reconnect_is_not_called_on_the_new_connection(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """The server changes target silently and dies; the next call opens a new connection,
    whose first check lists the tools, however long the bound."""
    async with plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=3600):
        await add(client, "shifty", stdio_spec(SERVERS / "misbehaving.py", tmp_path))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        await call(client, session.session_id, "shifty_shift")
        died = await call(client, session.session_id, "shifty_die")
        refused = await call(client, session.session_id, "shifty_target", text="b")
    assert isinstance(died, ErrorReply) and died.code == "uncertain", died
    _refused_as_changed(refused)


async def test_a_session_asking_for_an_unknown_server_is_told_so(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    async with plane(run_service, bus_settings, tmp_path / "state"):
        session = await open_session(client, autonomy="L3", mcp=["ghost"])
    assert session.tools == ()
    assert len(session.notices) == 1
    assert "ghost" in session.notices[0] and "bastion mcp add" in session.notices[0]


@pytest.mark.parametrize("field", ["command", "url"])
async def test_a_server_without_its_command_or_url_is_refused_with_what_to_give(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    field: str,
) -> None:
    spec = (
        McpServerSpec(transport="stdio") if field == "command" else McpServerSpec(transport="http")
    )
    async with plane(run_service, bus_settings, tmp_path / "state"):
        with pytest.raises(RemoteError) as refused:
            await request(
                client, subjects.MCP_ADD, AddServer(name="notes", spec=spec), McpReview,
                timeout_s=30,
            )  # fmt: skip
    assert refused.value.code == "invalid_input"
    assert ("-- CMD" if field == "command" else "--url URL") in refused.value.message


async def test_a_server_dying_mid_call_leaves_the_call_uncertain_and_never_repeats_it(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    async with plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "bad", stdio_spec(SERVERS / "misbehaving.py", tmp_path))
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        died = await call(client, session.session_id, "bad_die")
        again = await call(client, session.session_id, "bad_die")
        alive = await call(client, session.session_id, "bad_pid")
    assert isinstance(died, ErrorReply) and died.code == "uncertain", died
    assert "stopped" in died.message and "exit status 3" in died.message
    assert isinstance(again, ErrorReply) and again.code == "uncertain", again
    assert "an identical bad_die call was made" in again.message
    assert "ask MCP server bad" in again.message
    assert text_of(alive).splitlines()[-1].isdigit()


@pytest.mark.parametrize(
    ("tool", "said"),
    [("huge", "sent a message over 4194304 bytes"), ("garbage", "JSON-RPC")],
)
async def test_an_oversized_or_malformed_answer_is_a_bounded_clear_error_and_the_gateway_stays_up(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    tool: str,
    said: str,
) -> None:
    async with plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "bad", stdio_spec(SERVERS / "misbehaving.py", tmp_path))
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        first = await call(client, session.session_id, "bad_environ")
        broken = await call(client, session.session_id, f"bad_{tool}")
        after = await call(client, session.session_id, "bad_pid")
    assert isinstance(broken, ErrorReply) and broken.code == "uncertain", broken
    assert said in broken.message, broken.message
    assert len(broken.message) < 1000
    assert isinstance(first, ToolOutput)
    assert text_of(after).isdigit()  # the next call is made on a new connection


async def test_a_server_gets_its_variables_from_the_vault_and_never_shows_them_to_the_model(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--env NAME`: the tenant's vault secret NAME, leased to the mcp service's own key,
    else the mcp service's environment; a value the server echoes is cut from its answer."""
    mcp_key = key_file(tmp_path, "mcp-lease.key")
    public = base64.b64encode(public_bytes(read_x25519_key(mcp_key))).decode()
    monkeypatch.setenv("FROM_SERVICE_ENV", "a-value-from-the-environment")
    monkeypatch.setenv("NOT_NAMED", "never given")
    spec = msgspec.structs.replace(
        stdio_spec(SERVERS / "misbehaving.py", tmp_path),
        env=("NOTES_TOKEN", "FROM_SERVICE_ENV"),
    )
    mcp_settings = McpSettings(
        nats_url=bus_settings.nats_url,
        http_listen="127.0.0.1:0",
        state_dir=str(tmp_path / "state"),
        mcp_key_file=str(mcp_key),
    )
    vault = vault_settings(bus_settings.nats_url, key_file(tmp_path), vault_lease_keys=public)
    async with (
        run_service(vault_service, vault),
        run_service(policy_service, PolicySettings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        run_service(mcp_service, mcp_settings),
    ):
        await add_secret(client, "NOTES_TOKEN", b"not-a-real-token-0451")
        await add(client, "bad", spec)
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        shown = text_of(await call(client, session.session_id, "bad_environ"))
    assert '"NOTES_TOKEN": "[secret NOTES_TOKEN]"' in shown
    assert '"FROM_SERVICE_ENV": "[secret FROM_SERVICE_ENV]"' in shown
    assert "not-a-real-token-0451" not in shown and "a-value-from-the-environment" not in shown
    assert "NOT_NAMED" not in shown


async def test_a_value_of_the_tenants_never_given_to_the_server_is_cut_from_its_answer(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """A server may come by a tenant's value some other way (a file a command wrote it into):
    every value of the tenant's is cut from what the server answers, not only its own."""
    mcp_key = key_file(tmp_path, "mcp-lease.key")
    public = base64.b64encode(public_bytes(read_x25519_key(mcp_key))).decode()
    mcp_settings = McpSettings(
        nats_url=bus_settings.nats_url,
        http_listen="127.0.0.1:0",
        state_dir=str(tmp_path / "state"),
        mcp_key_file=str(mcp_key),
    )
    vault = vault_settings(bus_settings.nats_url, key_file(tmp_path), vault_lease_keys=public)
    value = "deploy-" + base64.b32encode(bytes(range(20))).decode()
    async with (
        run_service(vault_service, vault),
        run_service(policy_service, PolicySettings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        run_service(mcp_service, mcp_settings),
    ):
        await add_secret(client, "DEPLOY_TOKEN", value.encode())
        await add(client, "bad", stdio_spec(SERVERS / "misbehaving.py", tmp_path))
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        shown = text_of(await call(client, session.session_id, "bad_target", text=value))
    assert shown == "kept [secret DEPLOY_TOKEN]"


async def test_a_variable_with_no_value_anywhere_is_refused_saying_where_to_put_it(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    spec = msgspec.structs.replace(
        stdio_spec(SERVERS / "misbehaving.py", tmp_path), env=("NOWHERE_TOKEN",)
    )
    master = key_file(tmp_path)
    async with (
        run_service(vault_service, vault_settings(bus_settings.nats_url, master)),
        plane(run_service, bus_settings, tmp_path / "state"),
    ):
        with pytest.raises(RemoteError) as refused:
            await add(client, "bad", spec)
    assert refused.value.code == "invalid_input"
    assert "bastion secret add NOWHERE_TOKEN" in refused.value.message
