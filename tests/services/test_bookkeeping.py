"""What a call keeps, now that it keeps no more than it must (docs/architecture.md §2.1): a
turn given back is an empty record, free to any instance and taken again by the one that
left it; a call sent without a call id leaves no record by call id, one sent with a call
id leaves its outcome; a call's audit records are stored, in order, before it is answered."""

from __future__ import annotations

from pathlib import Path

import anyio

from bastion.orchestrator.callrecords import record_key
from bastion.orchestrator.turns import TurnRecord, Turns
from bastion.proto import subjects
from bastion.proto.journal import CallRecord
from bastion.proto.tools import ToolCall, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.kv import TypedBucket
from tests.helpers.approvals import records_of
from tests.helpers.bus import Plane
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session


async def test_a_turn_given_back_is_free_to_another_instance_and_to_the_one_that_left_it(
    client: Client,
) -> None:
    first = await Turns.open(client, "test_turns_free", ttl_s=5, wait_s=10)
    second = await Turns.open(client, "test_turns_free", ttl_s=5, wait_s=10)
    bucket = await TypedBucket.open(client, "test_turns_free", TurnRecord)
    with anyio.fail_after(20):
        async with first.hold("s1") as taken_over:
            assert not taken_over
        found = await bucket.find("s1")
        assert found is not None and found.value == TurnRecord()
        async with second.hold("s1", wait_s=0) as taken_over:  # free: no wait, no takeover
            assert not taken_over
            held = await bucket.find("s1")
            assert held is not None and held.value.holder == second.holder
        # `first` remembers a free record another instance has written over since: it
        # reads the record again and takes the turn as it is now
        async with first.hold("s1", wait_s=0) as taken_over:
            assert not taken_over
            held = await bucket.find("s1")
            assert held is not None and held.value.holder == first.holder
        async with first.hold("s1", shared=True, wait_s=0) as taken_over:
            assert not taken_over
            held = await bucket.find("s1")
            assert held is not None and len(held.value.readers) == 1
        found = await bucket.find("s1")
        assert found is not None and found.value == TurnRecord()


async def test_only_a_call_sent_with_a_call_id_keeps_a_record_by_call_id(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    owned(workspace)
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        without = await call(client, sid, "read_file", path="notes.txt")
        assert isinstance(without, ToolOutput)
        ask = ToolCall(tool="read_file", input={"path": "notes.txt"}, call_id="mine-1")
        given = await request(client, subjects.session_call(sid), ask, ToolOutput, timeout_s=30)
        assert "notes" in given.text
        records = await TypedBucket.open(client, subjects.CALLS_BUCKET, CallRecord)
        assert await records.find(record_key(sid, without.call_id)) is None
        kept = await records.find(record_key(sid, "mine-1"))
        assert kept is not None and kept.value.state == "done" and "notes" in kept.value.text
        # the audit log had each call's records stored, in order, before it was answered
        actions = [r.action for _, r in await records_of(client, "default", sid)]
        assert [a for a in actions if a in {"decision", "call", "result"}] == [
            "decision", "call", "result", "decision", "call", "result",
        ]  # fmt: skip
