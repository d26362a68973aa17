"""The audit log: every decision, call and result in a stream nobody can rewrite, and no
whole input, content or secret in it."""

from __future__ import annotations

from pathlib import Path

import anyio
import nats.js.errors
import pytest
from nats.aio.msg import Msg

from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import records_of
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session, orchestrator


@pytest.mark.usefixtures("plane")
async def test_every_decision_call_and_result_is_recorded_in_order_without_content(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    marker = "MARKER-4f1c0a-do-not-store"
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        other = await open_session(client, workspace=str(workspace), autonomy="L1")
        await call(client, session.session_id, "write_file", path="m.txt", content=marker)
        await call(client, session.session_id, "read_file", path="m.txt")
        await call(client, other.session_id, "write_file", path="x.txt", content="no")
    records = await records_of(client, "default", session.session_id)
    assert [(r.action, r.tool, r.outcome) for _, r in records] == [
        ("decision", "write_file", "allow"),
        ("call", "write_file", ""),
        ("result", "write_file", "ok"),
        ("decision", "read_file", "allow"),
        ("call", "read_file", ""),
        ("result", "read_file", "ok"),
    ]
    write_call = records[1][1]
    assert write_call.summary == '{"content":"<26 bytes>","path":"m.txt"}'
    assert records[0][1].rule == "level.L3.write"
    assert len({r.call_id for _, r in records[:3]}) == 1
    # the content was written and read back, yet it is nowhere in the stream
    js = client.jetstream()
    info = await js.stream_info(subjects.AUDIT_STREAM)
    assert info.state.last_seq is not None
    for seq in range(1, info.state.last_seq + 1):
        raw = await js.get_msg(subjects.AUDIT_STREAM, seq)
        assert marker.encode() not in (raw.data or b"")
    refused = await records_of(client, "default", other.session_id)
    assert [(r.action, r.outcome) for _, r in refused] == [
        ("decision", "deny"),
        ("result", "denied"),
    ]


@pytest.mark.usefixtures("plane")
async def test_a_calls_records_reach_nats_before_the_call_reaches_the_sandbox(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    (workspace / "notes.txt").write_text("notes\n")
    owned(workspace)
    seen: list[str] = []
    all_seen = anyio.Event()

    async def saw(msg: Msg) -> None:  # one subscription: in the order NATS routed them
        if msg.subject == subjects.SANDBOX_FILES:
            seen.append("sandbox.files")
        elif msg.subject.startswith("bastion.v1.audit."):
            seen.append(decode(msg.data, AuditRecord).action)
        if len(seen) == 4:
            all_seen.set()

    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        await client.subscribe("bastion.v1.>", cb=saw)
        await call(client, session.session_id, "read_file", path="notes.txt")
        with anyio.fail_after(10):
            await all_seen.wait()
    assert seen == ["decision", "call", "sandbox.files", "result"]


@pytest.mark.usefixtures("plane")
async def test_the_audit_stream_refuses_deleting_and_purging(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        await call(client, session.session_id, "list_files")
    js = client.jetstream()
    with pytest.raises(nats.js.errors.Error):
        await js.delete_msg(subjects.AUDIT_STREAM, 1)
    with pytest.raises(nats.js.errors.Error):
        await js.purge_stream(subjects.AUDIT_STREAM)
    info = await js.stream_info(subjects.AUDIT_STREAM)
    assert info.config.deny_delete and info.config.deny_purge
    assert info.state.messages == 3 and info.state.first_seq == 1
