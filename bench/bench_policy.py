"""How many decisions one policy instance makes, against a bare NATS echo in the same run.

It starts a NATS server and, in turn, three responders as separate processes: a bare
request/reply echo (the baseline: what the bus alone costs), the policy service with no
operator policies, and the policy service with a small Cedar set. Each is timed with
sequential requests and with `--callers` concurrent callers. Then the in-process
decision function is timed with and without the Cedar set, to show what Cedar itself
costs. It prints medians (µs per decision), decisions per second, the responder's CPU
time per request (from /proc: a figure the machine's load hardly moves), and ratios.
Usage: python -m bench.bench_policy [--calls N] [--callers 50]   (from the repository root)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import nats
from nats.aio.msg import Msg

from bastion.cli.natsserver import running_nats_server
from bastion.policy.cedar_store import OperatorPolicies
from bastion.policy.decide import decide
from bastion.proto import subjects
from bastion.proto.policy import PolicyDecision, PolicyRequest, PolicyStatus, PolicyStatusQuery
from bastion.shared.bus import Client, connect, request, round_trip
from bastion.shared.errors import Unavailable
from bastion.shared.settings import BusSettings
from bench.common import percentile

ECHO_SUBJECT = "bench.echo"

POLICIES = """
@id("no-secrets")
forbid (principal, action == Action::"write", resource is Path)
when { context.target like "secrets/*" };

@id("acme-no-shell")
forbid (principal in Tenant::"acme", action, resource in Tool::"shell");

@id("shell-asks-when-tainted")
@ask("a tainted session's commands are reviewed")
forbid (principal, action, resource in Tool::"shell") when { context.tainted };

@id("no-internal-hosts")
forbid (principal, action == Action::"external", resource is Host)
when { context.target like "*.internal" };

@id("spend-needs-l6")
forbid (principal, action == Action::"spend", resource) when { context.level < 6 };
"""

DECISION = PolicyRequest(
    session_id="0123456789abcdef",
    tenant="default",
    agent="bench",
    autonomy="L3",
    tool="write_file",
    effect="write",
    target="notes/2.4.0.md",
    input_summary='{"path":"notes/2.4.0.md","content":"..."}',
)
"""A call every policy has to look at and none forbids: the full evaluation, every time."""


async def echo(nats_url: str) -> None:
    """The baseline responder: answer every request with its own bytes."""
    client = await nats.connect(nats_url)

    async def answer(message: Msg) -> None:
        await message.respond(message.data)

    await client.subscribe(ECHO_SUBJECT, cb=answer)
    await round_trip(client)
    print("ready", flush=True)
    await anyio.sleep_forever()


@contextmanager
def responder(argv: list[str], env: dict[str, str]) -> Iterator[int]:
    """The responder run as its own process; yields its pid."""
    process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    try:
        yield process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


async def until_answered(client: Client, ask: Callable[[], Awaitable[object]]) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                await ask()
                return
            except Unavailable:
                await anyio.sleep(0.05)  # poll interval while the process starts


async def sequential(calls: int, one: Callable[[], Awaitable[object]]) -> list[float]:
    """Latency of `calls` requests one after the other, in µs."""
    for _ in range(min(50, calls)):
        await one()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await one()
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


async def concurrent(calls: int, callers: int, one: Callable[[], Awaitable[object]]) -> float:
    """Requests per second with `callers` callers sharing `calls` requests."""
    each = max(1, calls // callers)

    async def caller() -> None:
        for _ in range(each):
            await one()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(callers):
            tg.start_soon(caller)
    return each * callers / (time.perf_counter() - started)


Row = tuple[str, list[float], float, float]
"""A responder's latencies (µs), requests per second concurrently, CPU µs per request."""


def cpu_us(pid: int) -> float:
    """The CPU time (user and system, µs) process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e6 / os.sysconf("SC_CLK_TCK")


async def timed_both(
    pid: int, calls: int, callers: int, one: Callable[[], Awaitable[object]]
) -> tuple[list[float], float, float]:
    """`sequential` and `concurrent` of `one`, and the responder's CPU µs per request."""
    before = cpu_us(pid)
    samples = await sequential(calls, one)
    per_second = await concurrent(calls, callers, one)
    made = min(50, calls) + calls + max(1, calls // callers) * callers
    return samples, per_second, (cpu_us(pid) - before) / made


async def through_the_bus(nats_url: str, policy_dir: Path, calls: int, callers: int) -> list[Row]:
    rows: list[Row] = []
    async with connect(BusSettings(nats_url=nats_url), "bench") as client:

        async def echoed() -> object:
            return await request(client, ECHO_SUBJECT, DECISION, PolicyRequest, timeout_s=10)

        async def decided() -> object:
            return await request(
                client, subjects.POLICY_DECIDE, DECISION, PolicyDecision, timeout_s=10
            )

        async def status() -> object:
            return await request(
                client, subjects.POLICY_STATUS, PolicyStatusQuery(), PolicyStatus, timeout_s=10
            )

        with responder([sys.executable, "-m", "bench.bench_policy", "--echo", nats_url], {}) as pid:
            await until_answered(client, echoed)
            rows.append(
                ("bare NATS echo (baseline)", *await timed_both(pid, calls, callers, echoed))
            )
        for label, directory in (
            ("policy, no operator policies", policy_dir / "none"),
            ("policy, 5 Cedar policies", policy_dir),
        ):
            env = {"BASTION_NATS_URL": nats_url, "BASTION_POLICY_DIR": str(directory)}
            with responder([sys.executable, "-m", "bastion.policy"], env) as pid:
                await until_answered(client, status)
                rows.append((label, *await timed_both(pid, calls, callers, decided)))
    return rows


def in_process(policy_dir: Path, calls: int) -> list[tuple[str, list[float]]]:
    """µs per call of `decide`, in batches of 100, without and with the Cedar set."""
    policies = OperatorPolicies(policy_dir)
    policies.reload_if_changed()
    assert policies.status().policies == 5, policies.status().error
    rows = []
    for label, operator in (("decide(), level table only", None), ("decide(), 5 Cedar", policies)):
        for _ in range(200):
            decide(DECISION, operator)
        samples = []
        for _ in range(max(1, calls // 100)):
            started = time.perf_counter()
            for _ in range(100):
                decide(DECISION, operator)
            samples.append((time.perf_counter() - started) * 1e6 / 100)
        rows.append((label, samples))
    return rows


def report(bus: list[Row], local: list[tuple[str, list[float]]]) -> None:
    print(
        f"{'through the bus':<32} {'median µs':>10} {'p99 µs':>10} {'seq/s':>9} "
        f"{'conc/s':>9} {'ratio':>7} {'CPU µs':>7}"
    )
    base = statistics.median(bus[0][1])
    for name, samples, per_second, cpu in bus:
        median = statistics.median(samples)
        print(
            f"{name:<32} {median:>10.0f} {percentile(samples, 0.99):>10.0f} "
            f"{1e6 / median:>9.0f} {per_second:>9.0f} {median / base:>6.2f}x {cpu:>7.0f}"
        )
    print(f"\n{'in process':<32} {'median µs':>10} {'p99 µs':>10} {'per s':>9} {'ratio':>7}")
    local_base = statistics.median(local[0][1])
    for name, samples in local:
        median = statistics.median(samples)
        print(
            f"{name:<32} {median:>10.1f} {percentile(samples, 0.99):>10.1f} "
            f"{1e6 / median:>9.0f} {median / local_base:>6.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed requests per measure")
    parser.add_argument("--callers", type=int, default=50, help="concurrent callers")
    parser.add_argument("--echo", metavar="NATS_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo:
        anyio.run(echo, args.echo)
        return
    with tempfile.TemporaryDirectory() as tmp:
        policy_dir = Path(tmp) / "policies"
        policy_dir.mkdir()
        (policy_dir / "bench.cedar").write_text(POLICIES)
        with running_nats_server(Path(tmp) / "nats") as nats_url:
            print(
                f"{args.calls} requests per measure ({args.callers} callers when concurrent), "
                f"after warm-up; NATS on {nats_url}; each responder is its own process\n"
            )
            bus = anyio.run(through_the_bus, nats_url, policy_dir, args.calls, args.callers)
        report(bus, in_process(policy_dir, args.calls * 5))


if __name__ == "__main__":
    main()
