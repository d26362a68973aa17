"""The floor under a `read_file`: its hops over NATS with handlers that do nothing.

A `read_file` through the plane is a chain of hops between processes: the agent's request
to the orchestrator, the orchestrator's requests to the sandbox (`sandbox.resolve`), to the
policy (`policy.decide`) and to the sandbox again (`sandbox.files`), the audit records the
stream acknowledges, the answer. This benchmark runs that chain with nothing else in it —
three processes besides itself (an "orchestrator", a "policy", a "sandbox"), each a bare
nats-py client whose handlers answer a few bytes at once, on a NATS server of its own with
JetStream — so no code of ours is measured, only the bus and the event loops. It times,
one call after another (one agent, as `bench_calls` does):

- `echo`: the agent's request answered by the orchestrator at once (one hop);
- `least a read needs`: the orchestrator asks the sandbox, the policy and the sandbox
  again, one after another (the decision needs the resolved path, the read needs the
  decision), stores one audit record and awaits its acknowledgement, then answers;
- `a read's messages today`: the same with what a `read_file` sends today around it (the
  turn taken and given back and the session's count: three KV writes; the session read
  once; three audit records acknowledged together; two events), the counts of
  `bench_bookkeeping`;
- with `--plane`, `read_file` through `bastion up` in the same run, for the ratio.

It prints the median and p99 of each in milliseconds, each median over `echo`'s, and the
CPU time the three bare services and the NATS server spent per call (from /proc).
What it shows: the least a read must cost on this machine, whatever the code around it.
Usage: python -m bench.bench_floor [--calls N] [--plane]   (from the repository root)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from multiprocessing.synchronize import Event
from pathlib import Path

import anyio
import nats
from nats.aio.msg import Msg
from nats.js.api import KeyValueConfig, StreamConfig

from bastion.cli.natsserver import running_nats_server
from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo
from bastion.shared.bus import connect, request
from bench.common import bastion_up, call, percentile, sandbox_workspace

REPLY = b"\x81\xa2ok\xc3"
"""What every bare handler answers: a few bytes of msgpack, like a small reply struct."""


async def _serve(url: str, subjects: tuple[str, ...], ready: Event) -> None:
    """A bare service: each of `subjects` answered with `REPLY` at once, in a queue group."""
    client = await nats.connect(url)

    async def answer(msg: Msg) -> None:
        await msg.respond(REPLY)

    for subject in subjects:
        await client.subscribe(subject, queue="floor", cb=answer)
    await client.flush()
    ready.set()
    await anyio.sleep_forever()


async def _orchestrate(url: str, ready: Event) -> None:
    """A bare orchestrator: `floor.echo` answered at once; `floor.least` and `floor.today`
    after the hops a read needs, and those with a read's bookkeeping around them."""
    client = await nats.connect(url)
    js = client.jetstream()
    turns = await js.key_value("floor_turns")
    sessions = await js.key_value("floor_sessions")
    revisions = {"turn": await turns.put("s", b"free"), "session": await sessions.put("s", b"0")}

    async def hops() -> None:
        await client.request("floor.sandbox.resolve", REPLY, timeout=10)
        await client.request("floor.policy.decide", REPLY, timeout=10)
        await client.request("floor.sandbox.files", REPLY, timeout=10)

    async def echo(msg: Msg) -> None:
        await msg.respond(REPLY)

    async def least(msg: Msg) -> None:
        await hops()
        await js.publish("floor.audit.s", REPLY)
        await msg.respond(REPLY)

    async def today(msg: Msg) -> None:
        revisions["turn"] = await turns.update("s", b"mine", last=revisions["turn"])
        await sessions.get("s")
        audits = []
        for _ in range(3):
            audits.append(await js.publish_async("floor.audit.s", REPLY))
            if len(audits) == 1:
                await hops()
        await client.publish("floor.events.decided", REPLY)
        revisions["session"] = await sessions.update("s", b"1", last=revisions["session"])
        revisions["turn"] = await turns.update("s", b"free", last=revisions["turn"])
        for each in audits:
            await each
        await client.publish("floor.events.finished", REPLY)
        await msg.respond(REPLY)

    for subject, handler in (("floor.echo", echo), ("floor.least", least), ("floor.today", today)):
        await client.subscribe(subject, queue="floor", cb=handler)
    await client.flush()
    ready.set()
    await anyio.sleep_forever()


def _cpu_ms(pids: list[int]) -> float:
    """The CPU time (user and system, ms) processes `pids` have used so far, from /proc."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    used = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used += (int(fields[11]) + int(fields[12])) * tick_ms
    return used


def _process(target: Callable[..., Awaitable[None]], *args: object) -> None:
    anyio.run(target, *args)


async def _streams(url: str) -> None:
    client = await nats.connect(url)
    js = client.jetstream()
    await js.add_stream(StreamConfig(name="floor_audit", subjects=["floor.audit.>"]))
    for bucket in ("floor_turns", "floor_sessions"):
        await js.create_key_value(KeyValueConfig(bucket=bucket))
    await client.close()


async def _timed(url: str, subject: str, calls: int) -> list[float]:
    client = await nats.connect(url)
    for _ in range(min(20, calls)):
        await client.request(subject, REPLY, timeout=10)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await client.request(subject, REPLY, timeout=10)
        samples.append((time.perf_counter() - started) * 1000)
    await client.close()
    return samples


async def _plane_reads(calls: int) -> list[float]:
    """`read_file` through `bastion up`, timed as `bench_calls` times it."""
    with tempfile.TemporaryDirectory() as scratch:
        workspace = sandbox_workspace(Path(scratch) / "workspace")
        (workspace / "notes.txt").write_text("a line of notes\n" * 64)
        with bastion_up(Path(scratch) / "state") as bus:
            async with connect(bus, "bench") as client:
                session: SessionInfo = await request(
                    client,
                    subjects.SESSION_OPEN,
                    OpenSession(agent="bench", workspace=str(workspace)),
                    SessionInfo,
                    timeout_s=30,
                )
                for _ in range(min(20, calls)):
                    await call(client, session.session_id, "read_file", path="notes.txt")
                samples = []
                for _ in range(calls):
                    started = time.perf_counter()
                    await call(client, session.session_id, "read_file", path="notes.txt")
                    samples.append((time.perf_counter() - started) * 1000)
                return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--plane", action="store_true", help="also time read_file through it")
    args = parser.parse_args()
    rows: list[tuple[str, list[float], float | None]] = []
    with tempfile.TemporaryDirectory() as scratch, running_nats_server(Path(scratch)) as url:
        anyio.run(_streams, url)
        context = multiprocessing.get_context("spawn")
        started = []
        for target, extra in (
            (_orchestrate, ()),
            (_serve, (("floor.policy.decide",),)),
            (_serve, (("floor.sandbox.resolve", "floor.sandbox.files"),)),
        ):
            ready = context.Event()
            process = context.Process(
                target=_process,
                args=(target, url, *extra, ready) if extra else (target, url, ready),
                daemon=True,
            )
            process.start()
            if not ready.wait(30):
                raise SystemExit("a bare service did not start")
            started.append(process)
        server = ["pgrep", "-f", scratch]
        found = subprocess.run(server, capture_output=True, text=True, check=False)
        pids = [p.pid for p in started if p.pid] + [int(p) for p in found.stdout.split()]
        try:
            for name, subject in (
                ("echo", "floor.echo"),
                ("least a read needs", "floor.least"),
                ("a read's messages today", "floor.today"),
            ):
                before = _cpu_ms(pids)
                samples = anyio.run(_timed, url, subject, args.calls)
                used = (_cpu_ms(pids) - before) / (args.calls + min(20, args.calls))
                rows.append((name, samples, used))
        finally:
            for process in started:
                process.terminate()
    if args.plane:
        rows.append(("read_file through the plane", anyio.run(_plane_reads, args.calls), None))
    echo = statistics.median(rows[0][1])
    print(f"{args.calls} calls each, one after another, after 20 warm-up calls")
    print(f"{'measure':<30}{'median ms':>12}{'p99 ms':>12}{'/ echo':>10}{'CPU ms/call':>13}")
    for name, samples, used in rows:
        median = statistics.median(samples)
        cpu = "" if used is None else f"{used:.2f}"
        print(
            f"{name:<30}{median:>12.3f}{percentile(samples, 0.99):>12.3f}"
            f"{median / echo:>9.1f}x{cpu:>13}"
        )


if __name__ == "__main__":
    main()
