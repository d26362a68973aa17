"""The call-time pin check through the plane: each call of an upstream tool is checked
against a listing started when the orchestrator said the call was coming (its prefetch), a
change notice or a new connection lists again, and a server removed or changed in the
registry is refused at its next call (`docs/upstream-mcp.md`, "The call-time check").

The server is tests/mcp_servers/misbehaving.py: `shift` changes what its tool `target` says
of itself without saying so, `shift_loudly` says so, `shift_after_listing` changes it just
after answering the next listing.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec

from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.mcp import EffectOverride, McpServerRecord, RemoveServer, ServerRemoved
from bastion.proto.tools import CallParked, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.kv import TypedBucket
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import answer, pending
from tests.helpers.bus import ServiceRunner
from tests.helpers.mcp_gateway import add, mcp_plane, output_text
from tests.helpers.mcp_upstream import SERVERS, apart, stdio_spec
from tests.helpers.session import call, open_session
from tests.helpers.tracing import Spans, span_ancestry

MISBEHAVING = SERVERS / "misbehaving.py"
FOREVER = 3600.0
"""A bound no test outlives: a kept listing the operator lets stand this long is fresh
unless the server says otherwise."""


def _refused_as_changed(result: object) -> None:
    assert isinstance(result, ErrorReply), result
    assert result.code == "tool_changed"
    assert "changed target since this session was offered it" in result.message


async def test_each_call_is_checked_against_a_listing_started_ahead_of_it(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    tmp_path: Path,
    spans: Spans,
) -> None:
    """The mcp service lists on the orchestrator's prefetch, before the call reaches it:
    one listing a call, none of them inside the call's own span."""
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        before = len([s for s in spans.finished() if s.name == "MCP send tools/list"])
        results = [await call(client, session.session_id, "shifty_target", text=t) for t in "ab"]
    assert [output_text(r) for r in results] == ["kept a", "kept b"]
    finished = spans.finished()
    listings = [s for s in finished if s.name == "MCP send tools/list"]
    assert len(listings) - before == 2
    for listing in listings[before:]:
        assert f"process {subjects.MCP_CALL}" not in span_ancestry(finished, listing)
    checks = [s for s in finished if s.name == "mcp.pin_check"]
    assert len(checks) == 2


async def test_a_tool_changed_silently_between_two_calls_is_refused_at_the_second(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """Default settings: no notice, the same connection, the very next call."""
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        before = await call(client, session.session_id, "shifty_target", text="a")
        await call(client, session.session_id, "shifty_shift")
        refused = await call(client, session.session_id, "shifty_target", text="b")
    assert output_text(before) == "kept a"
    _refused_as_changed(refused)


async def test_a_tool_changed_right_after_the_listing_ahead_is_called_once_then_refused(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """The window any listing-based check leaves: the server changes target just after
    answering the listing the call is checked against, so that one call is made (with the
    definition the session was offered; what the server does is bounded by the sandbox and
    the policy, not by the pin); the next call's listing shows the change."""
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        await call(client, session.session_id, "shifty_shift_after_listing")
        in_the_window = await call(client, session.session_id, "shifty_target", text="a")
        refused = await call(client, session.session_id, "shifty_target", text="b")
    assert output_text(in_the_window) == "kept a"
    _refused_as_changed(refused)


async def test_an_approved_call_is_checked_against_a_listing_taken_after_the_approval(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """target spends, so each call waits for a person; the server changes it silently while
    the call waits: the approved call lists anew (its own prefetch), and is refused."""
    directory = apart(tmp_path)
    spec = msgspec.structs.replace(
        stdio_spec(MISBEHAVING, directory),
        effects=(EffectOverride(tool="target", effect="spend"),),
    )
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "shifty", spec)
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        parked = await call(client, session.session_id, "shifty_target", text="a")
        [waiting] = (await pending(client, session.session_id)).approvals
        (directory / "shift-now").touch()
        approved = await answer(client, waiting.request_id, approve=True)
    assert isinstance(parked, CallParked), parked
    _refused_as_changed(approved.result)


async def test_a_tool_changed_with_a_notice_is_refused_even_where_a_kept_listing_may_stand(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """An operator lets a kept listing stand an hour: only the server's change event makes
    the gateway list again, and from the first call after it is read the tool is refused."""
    async with mcp_plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=FOREVER):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        before = await call(client, session.session_id, "shifty_target", text="a")
        await call(client, session.session_id, "shifty_shift_loudly")
        for _ in range(200):  # the event may be read after the call's answer: bounded
            after = await call(client, session.session_id, "shifty_target", text="b")
            if not isinstance(after, ToolOutput):
                break
            await anyio.sleep(0.05)
    assert output_text(before) == "kept a"
    _refused_as_changed(after)


async def test_a_kept_listing_stands_only_as_long_as_the_operator_lets_it(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """With `BASTION_MCP_PIN_RECHECK_S` set, a silent change is called within the bound (the
    window the operator chose) and refused once it has passed."""
    async with mcp_plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=0.5):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        await call(client, session.session_id, "shifty_shift")
        within = await call(client, session.session_id, "shifty_target", text="a")
        await anyio.sleep(0.6)
        refused = await call(client, session.session_id, "shifty_target", text="b")
    assert output_text(within) == "kept a"
    _refused_as_changed(refused)


async def test_a_tool_changed_before_a_reconnect_is_refused_on_the_new_connection(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """The server changes target silently and dies; the next call opens a new connection,
    whose check lists the tools, however long a kept listing may stand."""
    async with mcp_plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=FOREVER):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        await call(client, session.session_id, "shifty_shift")
        died = await call(client, session.session_id, "shifty_die")
        refused = await call(client, session.session_id, "shifty_target", text="b")
    assert isinstance(died, ErrorReply) and died.code == "uncertain", died
    _refused_as_changed(refused)


async def test_a_removed_server_is_refused_at_the_next_call(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        before = await call(client, session.session_id, "shifty_target", text="a")
        await request(
            client, subjects.MCP_REMOVE, RemoveServer(name="shifty"), ServerRemoved, timeout_s=30
        )
        refused = await call(client, session.session_id, "shifty_target", text="b")
    assert output_text(before) == "kept a"
    assert isinstance(refused, ErrorReply) and refused.code == "not_found", refused
    assert "there is no MCP server shifty" in refused.message


async def test_a_server_another_replica_removes_or_changes_is_refused_at_the_next_call(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """Written in the registry by someone else (another mcp replica): the service learns it
    from its watch, and its connections to that server are closed. Changed to run where
    target is changed from the start, the next call's new connection shows it; removed,
    the next call is refused."""
    (tmp_path / "elsewhere").mkdir()
    changed_dir = apart(tmp_path / "elsewhere")
    (changed_dir / "shifted").touch()
    servers = await TypedBucket.open(client, subjects.MCP_SERVERS_BUCKET, McpServerRecord)
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "shifty", stdio_spec(MISBEHAVING, apart(tmp_path)))
        session = await open_session(client, autonomy="L5", mcp=["shifty"])
        before = await call(client, session.session_id, "shifty_target", text="a")
        kept = await servers.get("default.shifty")
        moved = msgspec.structs.replace(
            kept.value, spec=msgspec.structs.replace(kept.value.spec, directory=str(changed_dir))
        )
        await servers.replace("default.shifty", moved, kept.revision)
        changed = await call(client, session.session_id, "shifty_target", text="b")
        await servers.delete("default.shifty")
        removed = await call(client, session.session_id, "shifty_target", text="c")
    assert output_text(before) == "kept a"
    _refused_as_changed(changed)
    assert isinstance(removed, ErrorReply) and removed.code == "not_found", removed
