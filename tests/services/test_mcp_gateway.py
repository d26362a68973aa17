"""Upstream MCP servers through the whole plane: added and pinned, offered to a session as
`<server>_<tool>`, called; then changed, and what changed withheld until reviewed again.

The server is the example notes server, written with the official SDK, run over stdio in
bubblewrap (its virtual environment shown read-only) — the peer is the real SDK.
"""

from __future__ import annotations

import base64
from pathlib import Path

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
from bastion.proto.mcp import (
    AddServer,
    EffectOverride,
    ListServers,
    McpReview,
    McpServerSpec,
    ServerList,
)
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import SandboxSettings, sandbox_service
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.keyfiles import read_x25519_key
from bastion.shared.sealing import public_bytes
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.approvals import answer, pending
from tests.helpers.bus import ServiceRunner
from tests.helpers.mcp_gateway import add, mcp_plane, output_text, review
from tests.helpers.mcp_upstream import (
    NOTES,
    PYTHON_DIRS,
    SERVERS,
    apart,
    sandboxed_python,
    serving_http,
    stdio_spec,
)
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session
from tests.helpers.tracing import Spans, span_ancestry
from tests.helpers.vault import add as add_secret
from tests.helpers.vault import key_file, vault_settings

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


async def test_a_notes_server_is_added_pinned_offered_and_called_then_changes_are_withheld(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    notes = owned(tmp_path / "notes")
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
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
    assert "release" in output_text(kept)
    assert "release" in output_text(listed)
    assert "Ship the shell and MCP tools on Friday." in output_text(read)
    assert "note://{name}" in output_text(resources)
    assert output_text(resource) == "Ship the shell and MCP tools on Friday."
    assert offered["notes_resources"].taints and offered["notes_read_resource"].taints
    assert tainted.tainted_until is not None  # what a resource says comes from outside

    assert "notes_add_note" not in {t.name for t in changed.tools}
    assert "notes_export_notes" not in {t.name for t in changed.tools}
    assert any(
        "export_notes is new" in n and "bastion mcp review notes" in n for n in changed.notices
    )
    assert any("add_note changed" in n for n in changed.notices)
    assert isinstance(withheld, ErrorReply) and withheld.code == "unknown_tool"
    assert "Ship the shell" in output_text(still)

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
    spans: Spans,
) -> None:
    notes = owned(tmp_path / "notes")
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
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
    assert ancestry[:2] == [f"process {subjects.MCP_CALL}", f"send {subjects.MCP_CALL}"]
    assert ancestry[-2:] == ["process bastion.v1.session.*.call", "send bastion.v1.session.*.call"]


async def test_a_notes_server_over_streamable_http_is_pinned_called_and_its_changes_withheld(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    notes = owned(tmp_path / "notes")
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
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
    assert "groceries" in output_text(kept)
    assert output_text(read) == "rice"
    assert "notes_add_note" not in {t.name for t in changed.tools}
    assert any("export_notes is new" in n for n in changed.notices)
    assert {"notes_add_note", "notes_export_notes"} <= {t.name for t in after.tools}


async def test_a_tool_changed_after_the_session_started_is_not_called(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """The pin is checked again at call time, on the live connection: a server that changes
    a tool between tools/list and tools/call does not get the call."""
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "shifty", stdio_spec(SERVERS / "misbehaving.py", apart(tmp_path)))
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
    assert output_text(before) == "kept a"
    assert isinstance(refused, ErrorReply), refused
    assert refused.code == "tool_changed"
    assert "changed target since this session was offered it" in refused.message
    assert "bastion mcp review shifty" in refused.message
    assert got.calls == 3


async def test_a_session_asking_for_an_unknown_server_is_told_so(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
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
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        with pytest.raises(RemoteError) as refused:
            await request(
                client, subjects.MCP_ADD, AddServer(name="notes", spec=spec), McpReview,
                timeout_s=30,
            )  # fmt: skip
    assert refused.value.code == "invalid_input"
    assert ("-- CMD" if field == "command" else "--url URL") in refused.value.message


@pytest.mark.parametrize(
    ("field", "where", "words"),
    [
        ("directory", "state", "the MCP server's directory {given} is Bastion's state directory"),
        ("directory", "state/sessions", "lies inside Bastion's state directory"),
        ("directory", ".", "contains Bastion's state directory"),
        ("read_only_dirs", "state", "the read-only directory {given} would show Bastion's state"),
        ("read_only_dirs", ".", "would show Bastion's state directory"),
        ("read_only_dirs", "state/sessions", "would show Bastion's state directory"),
    ],
)
async def test_a_servers_directories_may_not_hold_or_lie_inside_the_state_dir(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    field: str,
    where: str,
    words: str,
) -> None:
    (tmp_path / "state" / "sessions").mkdir(parents=True)
    given = str((tmp_path / where).resolve())
    spec = notes_spec(owned(tmp_path / "notes"))
    bad = msgspec.structs.replace(
        spec, **({"directory": given} if field == "directory" else {"read_only_dirs": (given,)})
    )
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        with pytest.raises(RemoteError) as refused:
            await add(client, "notes", bad)
        listed = await request(client, subjects.MCP_LIST, ListServers(), ServerList, timeout_s=10)
    assert refused.value.code == "invalid_input"
    assert words.format(given=given) in refused.value.message
    assert "which holds sessions and secrets" in refused.value.message
    assert listed.servers == ()  # nothing was registered


@pytest.mark.parametrize("field", ["directory", "read_only_dirs"])
async def test_a_servers_directory_overlapping_the_sessions_skills_dir_is_not_offered(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    field: str,
) -> None:
    notes_dir = owned(tmp_path / "notes")
    shown_dir = tmp_path / "shown"
    shown_dir.mkdir()
    overlapped = notes_dir if field == "directory" else shown_dir
    skills = overlapped / "skills"
    skills.mkdir()
    spec = notes_spec(notes_dir)
    spec = msgspec.structs.replace(spec, read_only_dirs=(*spec.read_only_dirs, str(shown_dir)))
    work = owned(tmp_path / "work")
    sandbox = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"))
    async with (
        mcp_plane(run_service, bus_settings, tmp_path / "state"),
        run_service(sandbox_service, sandbox),
    ):
        await add(client, "notes", spec)
        apart = await open_session(client, autonomy="L3", mcp=["notes"])
        overlapping = await open_session(
            client, autonomy="L3", workspace=str(work), skills_dir=str(skills), mcp=["notes"]
        )
    what = (
        "the directory of MCP server notes"
        if field == "directory"
        else "a read-only directory of MCP server notes"
    )
    assert any(t.server == "notes" for t in apart.tools)
    assert not any(t.server == "notes" for t in overlapping.tools)
    [notice] = overlapping.notices
    assert notice.startswith("MCP server notes is not offered: the skills directory")
    assert f"and {what} {overlapped.resolve()} overlap" in notice
    assert f"give a skills directory apart from {what}" in notice


async def test_a_spend_tool_is_asked_every_time_and_cannot_be_approved_always(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    spend = notes_spec(
        owned(tmp_path / "notes"), effects=(EffectOverride(tool="add_note", effect="spend"),)
    )
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "notes", spend)
        sid = (await open_session(client, autonomy="L5", mcp=["notes"])).session_id
        await call(client, sid, "notes_add_note", name="pay", text="one")
        [first] = (await pending(client, sid)).approvals
        with pytest.raises(RemoteError) as always:
            await answer(client, first.request_id, approve=True, always=True)
        once = await answer(client, first.request_id, approve=True)
        await call(client, sid, "notes_add_note", name="pay", text="two")
        [second] = (await pending(client, sid)).approvals
    assert always.value.code == "invalid_input"
    assert "a person approves every payment" in always.value.message
    assert "approve this one once" in always.value.message
    assert isinstance(once.result, ToolOutput), once.result
    assert second.request_id != first.request_id and second.tool == "notes_add_note"


async def test_a_server_dying_mid_call_leaves_the_call_uncertain_and_never_repeats_it(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "bad", stdio_spec(SERVERS / "misbehaving.py", apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        died = await call(client, session.session_id, "bad_die")
        again = await call(client, session.session_id, "bad_die")
        alive = await call(client, session.session_id, "bad_pid")
    assert isinstance(died, ErrorReply) and died.code == "uncertain", died
    assert "stopped" in died.message and "exit status 3" in died.message
    assert isinstance(again, ErrorReply) and again.code == "uncertain", again
    assert "an identical bad_die call was made" in again.message
    assert "ask MCP server bad" in again.message
    assert output_text(alive).splitlines()[-1].isdigit()


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
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "bad", stdio_spec(SERVERS / "misbehaving.py", apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        first = await call(client, session.session_id, "bad_environ")
        broken = await call(client, session.session_id, f"bad_{tool}")
        after = await call(client, session.session_id, "bad_pid")
    assert isinstance(broken, ErrorReply) and broken.code == "uncertain", broken
    assert said in broken.message, broken.message
    assert len(broken.message) < 1000
    assert isinstance(first, ToolOutput)
    assert output_text(after).isdigit()  # the next call is made on a new connection


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
        stdio_spec(SERVERS / "misbehaving.py", apart(tmp_path)),
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
        shown = output_text(await call(client, session.session_id, "bad_environ"))
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
        await add(client, "bad", stdio_spec(SERVERS / "misbehaving.py", apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["bad"])
        shown = output_text(await call(client, session.session_id, "bad_target", text=value))
    assert shown == "kept [secret DEPLOY_TOKEN]"


async def test_a_variable_with_no_value_anywhere_is_refused_saying_where_to_put_it(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    spec = msgspec.structs.replace(
        stdio_spec(SERVERS / "misbehaving.py", apart(tmp_path)), env=("NOWHERE_TOKEN",)
    )
    master = key_file(tmp_path)
    async with (
        run_service(vault_service, vault_settings(bus_settings.nats_url, master)),
        mcp_plane(run_service, bus_settings, tmp_path / "state"),
    ):
        with pytest.raises(RemoteError) as refused:
            await add(client, "bad", spec)
    assert refused.value.code == "invalid_input"
    assert "bastion secret add NOWHERE_TOKEN" in refused.value.message
