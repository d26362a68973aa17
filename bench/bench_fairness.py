"""Fairness of cutting secrets: one tenant's `shell echo` alone, and while another tenant
floods the sandbox service with output to cut, without secrets and with ten, and with
each part of that flood alone.

It first times, in this process, one cut of a 256 KiB text with ten values (every form of
each: `bastion.shared.redaction`). Then it starts `bastion up` on a temporary state dir,
gives the tenant `secrets` ten values in the vault (the tenant `plain` has none), and times
the tenant `quiet`'s `shell echo` calls: alone; while `plain` floods; while `secrets`
floods the same way. A flood is three `bg_run "yes aaaa…"` (their logs' heads cut as
they come) and six sessions reading a 256 KiB file, each again as soon as it is answered
(each answer cut); then, with the values, only its three tasks and only its six reads. It prints the
median and p99 of each in milliseconds, each median over the alone one (goal ≤ 1.5×) and
over the flood without secrets (what the ten values add), what each flood got done (tasks
started, reads answered and refused), and the CPU time the sandbox and orchestrator
services spent meanwhile.
The flooding tenant's reads run in a process of their own, as another agent's would
(`--same-process`: in this one, beside the timed calls, where decoding their answers
delays the timed ones). With `--tenant-calls-per-s RATE`, Bastion runs with each tenant's
calls bounded (`BASTION_TENANT_CALLS_PER_S`, the operator's fair share of the plane): the
flood's refused reads come back 0.1 s later, as an agent told so would, and the timed calls
keep to half the rate.
Usage: python -m bench.bench_fairness [--calls N] [--same-process] [--tenant-calls-per-s RATE]
(from the repository root)
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.proto.vault import AddSecret, SecretAdded, VaultKey, VaultKeyQuery
from bastion.shared.bus import Client, connect, request
from bastion.shared.errors import BastionError
from bastion.shared.redaction import Redactor
from bastion.shared.sealing import seal
from bastion.shared.settings import BusSettings
from bench.common import bastion_up, call, cpu_ms, percentile, sandbox_workspace

QUIET, PLAIN, SECRETS = "quiet", "plain", "secrets"
VALUES = 10
LARGE = 256 * 1024
TASKS = 3
READS = 6
YES = "yes " + "a" * 200
REFUSED_PAUSE_S = 0.1


@dataclass
class Phase:
    """One measure: the quiet tenant's calls, and what a flooding tenant got done."""

    name: str
    samples: list[float]
    tasks: int = 0
    reads: int = 0
    refused: int = 0
    cpu: dict[str, float] | None = None


def values() -> list[tuple[str, str]]:
    return [(f"TOKEN_{n}", f"Tok-{secrets.token_urlsafe(24)}") for n in range(VALUES)]


def large_text() -> str:
    line = "x" * 60 + " a line of a large file, with no value in it at all\n"
    return (line * (LARGE // len(line) + 1))[:LARGE]


def one_cut_ms(rounds: int = 20) -> float:
    """The median time of one cut of a 256 KiB text with ten values, in this process."""
    redactor, text = Redactor(values()), large_text()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        redactor.redact(text)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def add_secret(client: Client, name: str, value: str) -> None:
    key: VaultKey = await request(
        client, subjects.VAULT_KEY, VaultKeyQuery(), VaultKey, timeout_s=30
    )
    sealed = seal(key.public_key, value.encode(), f"add {SECRETS} {name}".encode())
    await request(
        client,
        subjects.VAULT_ADD,
        AddSecret(tenant=SECRETS, name=name, sealed_value=sealed),
        SecretAdded,
        timeout_s=30,
    )


async def opened(client: Client, workspace: Path, tenant: str) -> str:
    session: SessionInfo = await request(
        client,
        subjects.SESSION_OPEN,
        OpenSession(
            agent="bench", tenant=tenant, workspace=str(workspace), shell=True, autonomy="L3"
        ),
        SessionInfo,
        timeout_s=30,
    )
    return session.session_id


async def echoes(client: Client, session_id: str, calls: int, pause_s: float) -> list[float]:
    await call(client, session_id, "shell", command="echo warm")
    samples = []
    for n in range(calls):
        await anyio.sleep(pause_s)  # under a tenant's rate, the quiet tenant stays under it
        started = time.perf_counter()
        await call(client, session_id, "shell", command=f"echo {n}")
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def ran(client: Client, session_id: str, tool: str, **given: object) -> bool:
    """One call of a flood; whether it ran (a refusal, `rate_limited` say, is counted)."""
    try:
        result: CallResult = await request(
            client,
            subjects.session_call(session_id),
            ToolCall(tool=tool, input=dict(given)),
            CallResult,
            timeout_s=300,
        )
    except BastionError:
        return False
    return isinstance(result, ToolOutput)


async def reading(client: Client, sessions: list[str], answered: Any, refused: Any) -> None:
    """Each session reading the large file again as soon as it is answered, counted in
    `answered` and `refused` (shared `multiprocessing.Value`s), until cancelled."""

    async def one(session_id: str) -> None:
        while True:
            done = await ran(client, session_id, "read_file", path="large.txt", limit=9999)
            with (answered if done else refused).get_lock():
                (answered if done else refused).value += 1
            if not done:  # refused (`rate_limited`): back later, as an agent told so would
                await anyio.sleep(REFUSED_PAUSE_S)

    async with anyio.create_task_group() as group:
        for session_id in sessions:
            group.start_soon(one, session_id)


def reader(bus: BusSettings, sessions: list[str], answered: Any, refused: Any) -> None:
    """The flooding tenant's reads in a process of their own, as its agent's would be:
    decoding its answers does not hold up the quiet tenant's calls in this one."""

    async def run() -> None:
        async with connect(bus, "bench-flood") as client:
            await reading(client, sessions, answered, refused)

    anyio.run(run)


async def flooded(
    client: Client,
    bus: BusSettings,
    workspace: Path,
    state: Path,
    tenant: str,
    quiet: str,
    calls: int,
    pause_s: float,
    *,
    tasks: int = TASKS,
    reads: int = READS,
    same_process: bool = False,
) -> Phase:
    """The quiet tenant's calls while `tenant` floods with `tasks` bg_run and `reads`
    reading sessions (in a process of their own unless `same_process`); its sessions
    closed after (which stops its tasks)."""
    part = (
        ""
        if (tasks, reads) == (TASKS, READS)
        else " (only its tasks)"
        if tasks
        else " (only its reads)"
    )
    phase = Phase(f"beside {tenant}'s flood{part}", [])
    sessions = [await opened(client, workspace, tenant) for _ in range(reads + tasks)]
    for session_id in sessions[reads:]:
        phase.tasks += await ran(client, session_id, "bg_run", command=YES, timeout_ms=600_000)
    spawn = multiprocessing.get_context("spawn")
    answered, refused = spawn.Value("i", 0), spawn.Value("i", 0)
    before = cpu_ms(state)
    async with anyio.create_task_group() as group:
        if same_process:
            group.start_soon(reading, client, sessions[:reads], answered, refused)
        elif reads:
            process = spawn.Process(
                target=reader, args=(bus, sessions[:reads], answered, refused), daemon=True
            )
            process.start()
        while reads and answered.value + refused.value == 0:  # noqa: ASYNC110 (counted elsewhere)
            await anyio.sleep(0.05)  # the flood is under way
        phase.samples = await echoes(client, quiet, calls, pause_s)
        if not same_process and reads:
            process.terminate()
            await anyio.to_thread.run_sync(process.join)
        group.cancel_scope.cancel()
    after = cpu_ms(state)
    phase.cpu = {name: after[name] - before[name] for name in ("sandbox", "orchestrator")}
    phase.reads, phase.refused = answered.value, refused.value
    for session_id in sessions:
        ref = SessionRef(session_id=session_id)
        await request(client, subjects.SESSION_CLOSE, ref, SessionInfo, timeout_s=60)
    return phase


async def measure(
    bus: BusSettings, workspace: Path, state: Path, calls: int, same_process: bool, rate: float
) -> list[Phase]:
    pause_s = 2 / rate if rate else 0.0  # the quiet tenant at half its rate at most
    (workspace / "large.txt").write_text(large_text())
    sandbox_workspace(workspace)
    async with connect(bus, "bench") as client:
        for name, value in values():
            await add_secret(client, name, value)
        quiet = await opened(client, workspace, QUIET)
        flood = functools.partial(
            flooded, client, bus, workspace, state, quiet=quiet, calls=calls, pause_s=pause_s
        )
        return [
            Phase("alone", await echoes(client, quiet, calls, pause_s)),
            await flood(PLAIN, same_process=same_process),
            await flood(SECRETS, same_process=same_process),
            await flood(SECRETS, reads=0),
            await flood(SECRETS, tasks=0, same_process=same_process),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="timed shell calls per measure")
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="read in this process, beside the timed calls (as this benchmark first did)",
    )
    parser.add_argument(
        "--tenant-calls-per-s",
        type=float,
        default=0.0,
        metavar="RATE",
        help="run Bastion with BASTION_TENANT_CALLS_PER_S=RATE, each tenant's calls bounded "
        "(the flood's refused reads come back after 0.1 s; the timed calls keep to half)",
    )
    args = parser.parse_args()
    rate = args.tenant_calls_per_s
    env = {**os.environ, "BASTION_TENANT_CALLS_PER_S": str(rate)} if rate else None
    cut = one_cut_ms()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = sandbox_workspace(Path(tmp) / "work")
        state = Path(tmp) / "state"
        with bastion_up(state, env=env) as bus:
            phases = anyio.run(measure, bus, workspace, state, args.calls, args.same_process, rate)
    print(f"one {LARGE // 1024} KiB cut with {VALUES} values, in process: {cut:.2f} ms")
    print(
        f"{args.calls} shell calls each, after a warm-up call; a flood: {TASKS} bg_run yes "
        f"and {READS} sessions reading {LARGE // 1024} KiB; load average "
        f"{os.getloadavg()[0]:.1f}; each tenant's calls per second: {rate or 'unbounded'}"
    )
    print(
        f"{'quiet tenant shell echo':<42} {'median ms':>10} {'p99 ms':>9} {'/ alone':>8} "
        f"{'/ plain':>8}  flood's tasks, reads (refused), CPU ms sandbox/orchestrator"
    )
    alone, plain = phases[:2]
    for phase in phases:
        median = statistics.median(phase.samples)
        print(
            f"{phase.name:<42} {median:>10.2f} {percentile(phase.samples, 0.99):>9.2f} "
            f"{median / statistics.median(alone.samples):>7.2f}x "
            f"{median / statistics.median(plain.samples):>7.2f}x  "
            + (
                f"{phase.tasks}, {phase.reads} ({phase.refused}), "
                f"{phase.cpu['sandbox']:.0f}/{phase.cpu['orchestrator']:.0f}"
                if phase.cpu is not None
                else ""
            )
        )


if __name__ == "__main__":
    main()
