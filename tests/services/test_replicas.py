"""Orchestrator replicas on one NATS: a session's calls one at a time, a dead holder's
session taken over, and per-tenant calls per second that keep a greedy tenant from
starving another."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import msgspec
import pytest

from bastion.orchestrator.approvalstore import ApprovalStore
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.orchestrator.store import SessionStore
from bastion.orchestrator.taint import tainted_by
from bastion.orchestrator.turns import TurnRecord, Turns, TurnTimeout
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import CallParked, ToolOutput
from bastion.shared.bus import Client
from bastion.shared.errors import RemoteError
from bastion.shared.kv import open_bucket
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import answer, as_running, pending
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.session import call, open_session


async def test_two_instances_never_hold_one_session_s_turn_at_once(client: Client) -> None:
    first = await Turns.open(client, "test_turns", ttl_s=5, wait_s=10)
    second = await Turns.open(client, "test_turns", ttl_s=5, wait_s=10)
    inside: list[str] = []
    overlaps = 0

    async def take(turns: Turns, name: str) -> None:
        nonlocal overlaps
        for _ in range(10):
            async with turns.hold("s1"):
                inside.append(name)
                overlaps += len(inside) > 1
                await anyio.sleep(0.005)
                inside.remove(name)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as both:
            both.start_soon(take, first, "first")
            both.start_soon(take, second, "second")
    assert overlaps == 0


async def test_a_turn_held_past_its_lifetime_is_renewed_and_stays_its_holders(
    client: Client,
) -> None:
    ttl_s = 0.6
    holder = await Turns.open(client, "test_turns_renewed", ttl_s=ttl_s, wait_s=10)
    other = await Turns.open(client, "test_turns_renewed", ttl_s=ttl_s, wait_s=10)
    with anyio.fail_after(20):
        async with holder.hold("s1"):
            await anyio.sleep(3 * ttl_s)  # renewed every third of it meanwhile
            with pytest.raises(TurnTimeout):
                async with other.hold("s1", wait_s=0):
                    pass
        async with other.hold("s1", wait_s=0):  # given back: free at once
            pass


async def test_a_turn_left_by_a_dead_holder_is_taken_over_once_it_expires(client: Client) -> None:
    kv = await open_bucket(client, "test_turns_dead")
    dead = TurnRecord(holder="gone:1", expires_at=time.time() + 0.3)
    await kv.create("s1", msgspec.msgpack.encode(dead))
    turns = await Turns.open(client, "test_turns_dead", ttl_s=5, wait_s=10)
    with pytest.raises(TurnTimeout):
        async with turns.hold("s1", wait_s=0):
            pass
    with anyio.fail_after(5):
        async with turns.hold("s1") as taken_over:
            assert taken_over
    async with turns.hold("s1") as taken_over:  # given back: no takeover this time
        assert not taken_over


async def test_a_session_s_calls_through_two_orchestrators_run_one_at_a_time(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url)
    async with (
        run_service(orchestrator_service, settings),
        run_service(orchestrator_service, settings),
    ):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        results: list[object] = []

        async def one(n: int) -> None:
            command = f"echo start {n} >> log; sleep 0.05; echo end {n} >> log"
            results.append(await call(client, session.session_id, "shell", command=command))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as calls:
                for n in range(8):
                    calls.start_soon(one, n)
    assert all(isinstance(r, ToolOutput) for r in results)
    lines = (workspace / "log").read_text().splitlines()
    assert len(lines) == 16
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.split()[0] == "start" and end == start.replace("start", "end")


async def test_a_greedy_tenant_is_refused_with_rate_limited_and_another_still_completes(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url, tenant_calls_per_s=20)
    async with run_service(orchestrator_service, settings):
        greedy = [
            await open_session(client, tenant="greedy", workspace=str(workspace)) for _ in range(8)
        ]
        modest = await open_session(client, tenant="modest", workspace=str(workspace))
        counts = {"greedy ok": 0, "greedy limited": 0, "modest ok": 0, "modest limited": 0}
        modest_done = anyio.Event()

        async def hammer(session_id: str) -> None:
            while not modest_done.is_set():
                result = await call(client, session_id, "read_file", path="a.txt")
                if isinstance(result, ErrorReply):
                    assert result.code == "rate_limited", result.message
                    assert "retry in" in result.message
                counts["greedy limited" if isinstance(result, ErrorReply) else "greedy ok"] += 1

        async def modestly() -> None:
            for _ in range(10):
                result = await call(client, modest.session_id, "read_file", path="a.txt")
                counts["modest limited" if isinstance(result, ErrorReply) else "modest ok"] += 1
                await anyio.sleep(0.1)  # 10 calls a second: within its quota
            modest_done.set()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as load:
                for session in greedy:
                    load.start_soon(hammer, session.session_id)
                load.start_soon(modestly)
    assert counts["modest ok"] == 10 and counts["modest limited"] == 0
    assert counts["greedy limited"] > 0 and counts["greedy ok"] > 0


async def test_a_session_taken_over_from_a_dead_holder_settles_its_running_call_as_uncertain(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url)
    async with run_service(orchestrator_service, settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L2")
        sid = session.session_id
        asked = await call(client, sid, "write_file", path="a.txt", content="a")
        assert isinstance(asked, CallParked)
        [parked] = (await pending(client, sid)).approvals
        # As if an orchestrator died running the approved call, its turn still in the store.
        store = await ApprovalStore.open(client, subjects.APPROVALS_BUCKET)
        await store.move(parked.request_id, ("pending",), as_running)
        turns = await open_bucket(client, subjects.TURNS_BUCKET)
        dead = TurnRecord(holder="gone:1", expires_at=time.time() + 0.5)
        await turns.put(sid, msgspec.msgpack.encode(dead))
        with anyio.fail_after(20), pytest.raises(RemoteError) as refused:
            await answer(client, parked.request_id, approve=True)
        [settled] = (await pending(client, sid, every_state=True)).approvals
        after = await call(client, sid, "read_file", path="a.txt")
    assert refused.value.code == "conflict" and "uncertain" in refused.value.message
    assert settled.state == "uncertain"
    assert isinstance(after, ErrorReply) and after.code == "not_found"  # it never ran


async def test_a_taint_written_late_by_a_holder_that_stalled_past_its_turn_is_seen_next(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    async with plane_of():
        session = await open_session(client, workspace=str(workspace))
        sid = session.session_id
        await call(client, sid, "write_file", path="README.md", content="1")
        [first] = (await pending(client, sid)).approvals
        await answer(client, first.request_id, approve=True, always=True)
        assert isinstance(
            await call(client, sid, "write_file", path="README.md", content="2"), ToolOutput
        )
        stalled = await Turns.open(client, subjects.TURNS_BUCKET, ttl_s=0.6, wait_s=10)

        async def never_renewed(session_id: str, held: object) -> None:
            await anyio.sleep_forever()

        # another replica holds the turn and stalls past its lifetime (no renewal reaches
        # the bus), while a call of the session takes the turn over; then it wakes and
        # writes what its call left (a web result's taint) to the session
        stalled._renew = never_renewed  # type: ignore[method-assign]
        store = await SessionStore.open(client, subjects.SESSIONS_BUCKET)
        with anyio.fail_after(30):
            async with stalled.hold(sid):
                assert isinstance(
                    await call(client, sid, "read_file", path="README.md"), ToolOutput
                )
                await store.update(sid, lambda s: tainted_by(s, datetime.now(UTC), 600.0))
        after = await call(client, sid, "write_file", path="README.md", content="3")
    # a tainted session's write asks a person, pre-approved or not
    assert isinstance(after, CallParked)
    assert (workspace / "README.md").read_text() == "2"
