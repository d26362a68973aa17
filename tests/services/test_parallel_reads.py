"""A session's reads side by side: reads of one session run at once (bounded), a write
waits for the reads before it and is not overtaken by those after it, a read the policy
asks about or whose call id still runs waits to be alone, across two orchestrators too,
and every call is audited and counted once. Overlap is shown by counting the calls a hook
holds at once (`tests.helpers.hookgate`), never by timing."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

from bastion.orchestrator.callorder import CallOrder
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.orchestrator.turns import TurnRecord, Turns, TurnTimeout
from bastion.proto import subjects
from bastion.proto.session import SessionInfo, SessionRef
from bastion.proto.tools import CallParked, CallResult, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import records_of
from tests.helpers.bus import ServiceRunner
from tests.helpers.hookgate import HookGate, Sent, send
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session, session_of

GRACE_S = 0.5
"""How long a test lets calls that should wait show whether they do (not a bound it checks:
a correct plane passes however long this is)."""


def files(workspace: Path, count: int) -> list[str]:
    """`count` files to read, r0.txt …, in a workspace owned by the sandbox's user."""
    names = [f"r{n}.txt" for n in range(count)]
    for name in names:
        (workspace / name).write_text(f"{name}\n")
    owned(workspace)
    return names


async def answers(sent: list[Sent]) -> list[CallResult]:
    return [await each.answer() for each in sent]


def inside_alone(gate: HookGate, path: str) -> bool:
    """Whether nothing else came in or went out while the call on `path` was in."""
    start, end = gate.position("in", path), gate.position("out", path)
    return end == start + 1


async def audited_once_each(client: Client, session_id: str, count: int) -> None:
    """The session's audit records (an orchestrator still running): a decision, the call
    and its result for each of its `count` calls, in that order per call, and its count."""
    records = [r for _, r in await records_of(client, "default", session_id)]
    per_call: dict[str, list[str]] = {}
    for record in records:
        if record.action in {"decision", "call", "result"}:
            per_call.setdefault(record.call_id, []).append(record.action)
    assert len(per_call) == count
    assert all(actions == ["decision", "call", "result"] for actions in per_call.values())
    assert (await session_of(client, session_id)).calls == count


@pytest.mark.usefixtures("plane")
async def test_eight_reads_of_one_session_run_at_once(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    names = files(workspace, 8)
    gate = HookGate()
    await gate.register(client)
    async with run_service(
        orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)
    ):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        with anyio.fail_after(60):
            sent = [await send(client, sid, "read_file", path=name) for name in names]
            await gate.until_held(8)  # one at a time, only one would ever be held
            await gate.release()
            results = await answers(sent)
            await audited_once_each(client, sid, 8)
    assert gate.most_inside == 8
    assert all(
        isinstance(r, ToolOutput) and n in r.text for r, n in zip(results, names, strict=True)
    )


@pytest.mark.usefixtures("plane")
async def test_reads_at_once_are_bounded_by_the_setting(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    names = files(workspace, 4)
    gate = HookGate()
    await gate.register(client)
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url, session_parallel_reads=2)
    async with run_service(orchestrator_service, settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        with anyio.fail_after(60):
            sent = [await send(client, session.session_id, "read_file", path=n) for n in names]
            await gate.until_held(2)
            await anyio.sleep(GRACE_S)  # a third read let in would be held by now
            held = gate.held
            await gate.release()
            results = await answers(sent)
    assert held == 2
    assert gate.most_inside == 2
    assert all(isinstance(r, ToolOutput) for r in results)


@pytest.mark.usefixtures("plane")
async def test_a_write_among_reads_waits_for_the_reads_before_it_and_those_after_wait_for_it(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    names = files(workspace, 8)
    gate = HookGate()
    await gate.register(client)
    async with run_service(
        orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)
    ):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        with anyio.fail_after(60):
            before = [await send(client, sid, "read_file", path=n) for n in names[:4]]
            await gate.until_held(4)
            write = await send(client, sid, "write_file", path="w.txt", content="w\n")
            after = [await send(client, sid, "read_file", path=n) for n in names[4:]]
            await anyio.sleep(GRACE_S)  # a write or later read not waiting would be held by now
            held = gate.held
            await gate.release()
            results = await answers([*before, write, *after])
            await audited_once_each(client, sid, 9)
    assert held == 4
    assert all(isinstance(r, ToolOutput) for r in results)
    write_in = gate.position("in", "w.txt")
    assert all(gate.position("out", n) < write_in for n in names[:4])
    assert all(gate.position("in", n) > gate.position("out", "w.txt") for n in names[4:])
    assert inside_alone(gate, "w.txt")


@pytest.mark.usefixtures("plane")
async def test_a_read_the_policy_asks_about_is_parked_alone_and_decided_once(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    names = files(workspace, 1)
    async with run_service(
        orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)
    ):
        session = await open_session(client, workspace=str(workspace), autonomy="L0")
        with anyio.fail_after(60):
            sent = await send(client, session.session_id, "read_file", path=names[0])
            parked = await sent.answer()
    assert isinstance(parked, CallParked)
    records = [r for _, r in await records_of(client, "default", session.session_id)]
    assert Counter(r.action for r in records if r.action == "decision") == {"decision": 1}
    assert [r.outcome for r in records if r.action == "decision"] == ["ask"]


@pytest.mark.usefixtures("plane")
async def test_a_read_sent_again_with_its_call_id_while_it_runs_gets_its_one_outcome(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    names = files(workspace, 1)
    gate = HookGate()
    await gate.register(client)
    async with run_service(
        orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)
    ):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        with anyio.fail_after(60):
            first = await send(client, sid, "read_file", call_id="c1", path=names[0])
            await gate.until_held(1)
            again = await send(client, sid, "read_file", call_id="c1", path=names[0])
            await anyio.sleep(GRACE_S)  # sent again while the first is held at its hook
            await gate.release()
            results = await answers([first, again])
    assert all(isinstance(r, ToolOutput) and names[0] in r.text for r in results)
    assert [(r.call_id, r.text) for r in results if isinstance(r, ToolOutput)] == 2 * [
        ("c1", results[0].text if isinstance(results[0], ToolOutput) else "")
    ]
    assert gate.log == [("in", names[0]), ("out", names[0])]  # made once


@pytest.mark.usefixtures("plane")
async def test_two_orchestrators_share_a_session_s_reads_and_keep_its_write_alone(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, workspace: Path
) -> None:
    names = files(workspace, 10)
    gate = HookGate()
    await gate.register(client)
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url)
    async with (
        run_service(orchestrator_service, settings),
        run_service(orchestrator_service, settings),
    ):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        with anyio.fail_after(60):
            reads = [await send(client, sid, "read_file", path=n) for n in names[:8]]
            await gate.until_held(8)  # whichever replica took each, all are in at once
            write = await send(client, sid, "write_file", path="w.txt", content="w\n")
            more = [await send(client, sid, "read_file", path=n) for n in names[8:]]
            await anyio.sleep(GRACE_S)  # a write let in beside the reads would be held by now
            held = gate.held
            await gate.release()
            results = await answers([*reads, write, *more])
            await audited_once_each(client, sid, 11)
    assert held >= 8 and gate.most_inside >= 8
    assert all(isinstance(r, ToolOutput) for r in results)
    write_in = gate.position("in", "w.txt")
    assert all(gate.position("out", n) < write_in for n in names[:8])
    assert inside_alone(gate, "w.txt")


async def test_turns_of_two_instances_are_shared_by_reads_and_held_alone_by_a_writer(
    client: Client,
) -> None:
    first = await Turns.open(client, "test_turns_shared", ttl_s=5, wait_s=10)
    second = await Turns.open(client, "test_turns_shared", ttl_s=5, wait_s=10)
    async with first.hold("s1", shared=True), second.hold("s1", shared=True):
        with pytest.raises(TurnTimeout):  # held by reads: no one holds it alone
            async with first.hold("s1", wait_s=0):
                pass
    async with first.hold("s1"):
        with pytest.raises(TurnTimeout):  # held alone: no read shares it
            async with second.hold("s1", shared=True, wait_s=0):
                pass
    async with second.hold("s1", shared=True, wait_s=0):  # given back: free again
        pass


async def test_a_writer_waiting_on_reads_keeps_other_instances_reads_out(client: Client) -> None:
    reader = await Turns.open(client, "test_turns_waited", ttl_s=5, wait_s=10)
    writer = await Turns.open(client, "test_turns_waited", ttl_s=5, wait_s=10)
    late = await Turns.open(client, "test_turns_waited", ttl_s=5, wait_s=10)
    order: list[str] = []
    reading = anyio.Event()
    release = anyio.Event()

    async def read() -> None:
        async with reader.hold("s1", shared=True):
            reading.set()
            await release.wait()
            order.append("read")

    async def write() -> None:
        async with writer.hold("s1"):
            order.append("write")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            await reading.wait()
            tasks.start_soon(write)
            while not await writer_marked(client):  # noqa: ASYNC110 (a KV record, no event)
                await anyio.sleep(0.01)
            with pytest.raises(TurnTimeout):  # the writer waits first: a new read stays out
                async with late.hold("s1", shared=True, wait_s=0):
                    pass
            release.set()
    assert order == ["read", "write"]


async def writer_marked(client: Client) -> bool:
    """Whether the turn of `s1` in `test_turns_waited` is marked as waited for."""
    kv = await client.jetstream().key_value("test_turns_waited")
    entry = await kv.get("s1")
    return bool(entry.value and msgspec.msgpack.decode(entry.value, type=TurnRecord).waiting)


async def test_a_read_that_needs_the_session_alone_stays_ahead_of_the_calls_after_it() -> None:
    order = CallOrder(8)
    read, write, later = order.enter(), order.enter(), order.enter()
    await order.wait(read, shared=True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as waiting:
            waiting.start_soon(partial(order.wait, write, shared=False))
            waiting.start_soon(partial(order.wait, later, shared=True))
            await anyio.wait_all_tasks_blocked()
            assert not write.let_in.is_set() and not later.let_in.is_set()
            order.again_exclusive(read)  # the policy asks: it is made again, alone, first
            await order.wait(read, shared=False)
            assert not write.let_in.is_set()
            order.leave(read)
            await write.let_in.wait()
            assert not later.let_in.is_set()
            order.leave(write)
    assert later.let_in.is_set()
    order.leave(later)
    assert order.idle


async def test_a_share_that_sees_a_writer_waiting_lets_no_further_read_of_its_own_in(
    client: Client,
) -> None:
    ttl_s = 0.6
    reader = await Turns.open(client, "test_turns_waited", ttl_s=ttl_s, wait_s=10)
    writer = await Turns.open(client, "test_turns_waited", ttl_s=ttl_s, wait_s=10)
    order: list[str] = []
    reading = anyio.Event()
    release = anyio.Event()

    async def first_read() -> None:
        async with reader.hold("s1", shared=True):
            reading.set()
            await release.wait()
            order.append("first read")

    async def write() -> None:
        async with writer.hold("s1"):
            order.append("write")

    async def second_read() -> None:
        async with reader.hold("s1", shared=True):
            order.append("second read")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first_read)
            await reading.wait()
            tasks.start_soon(write)
            while not await writer_marked(client):  # noqa: ASYNC110 (a KV record, no event)
                await anyio.sleep(0.01)
            await anyio.sleep(ttl_s)  # the share is renewed, and sees the mark, meanwhile
            tasks.start_soon(second_read)
            await anyio.wait_all_tasks_blocked()
            release.set()
    assert order == ["first read", "write", "second read"]


async def test_a_burst_of_reads_and_writes_of_one_session_is_answered_and_counted_once_each(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    owned(workspace)
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url)
    calls = 200
    async with run_service(orchestrator_service, settings):
        session = await open_session(client, workspace=str(workspace), autonomy="L3")
        sid = session.session_id
        answered: list[CallResult] = []

        async def one(n: int) -> None:
            if n % 25 == 0:  # a write now and then, alone between the reads
                answered.append(await call(client, sid, "write_file", path=f"w{n}", content="x"))
            else:
                answered.append(await call(client, sid, "read_file", path="notes.txt"))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as burst:
                for n in range(calls):
                    burst.start_soon(one, n)
        closed: SessionInfo = await request(
            client, subjects.SESSION_CLOSE, SessionRef(session_id=sid), SessionInfo, timeout_s=30
        )
    assert [r for r in answered if not isinstance(r, ToolOutput)] == []
    assert closed.calls == calls
    results = [r for _, r in await records_of(client, "default", sid) if r.action == "result"]
    assert len(results) == calls
