"""What one call costs the orchestrator in JetStream and bus traffic, by tool kind.

It starts a NATS server and, in this process, the policy, sandbox and orchestrator
services (the orchestrator on a connection whose every message out is counted), opens a
session, and makes `--calls` calls of each tool after two warm-up calls. Each message the
orchestrator sends is put in one class by its subject: a KV read (a direct get), a KV write
(a create, a compare-and-set update, a put or a delete, each acknowledged), an audit record
(a stream publish, acknowledged), an event (a core publish, no ack), or a request to a
service (policy, sandbox). It prints, per call of each tool, how many of each, and the
orchestrator's CPU time per call (`time.process_time` of this process, which runs the
three services: so compare it across runs of this benchmark only).
Usage: python -m bench.bench_bookkeeping [--calls N]   (from the repository root)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from bastion.cli.natsserver import running_nats_server
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, connect, request
from bastion.shared.settings import BusSettings
from bench.common import call, sandbox_workspace

TOOLS: dict[str, dict[str, object]] = {
    "read_file": {"path": "notes.txt"},
    "list_files": {"path": "."},
    "write_file": {"path": "out.txt", "content": "x"},
    "shell": {"command": "true"},
}
"""Each tool measured, and its input (a write's content is made unique per call)."""

COLUMNS = ("KV read", "KV write", "audit", "event", "request", "other")


def kinds_of(subject: str) -> tuple[str, str]:
    """The class of one message the orchestrator sent, by its subject, and what it is in
    that class (the bucket of a KV read or write, the subject of a request)."""
    parts = subject.split(".")
    if subject.startswith(("$JS.API.DIRECT.GET.", "$JS.API.STREAM.MSG.GET.")):
        stream = next((p for p in parts if p.startswith("KV_")), "?")
        return "KV read", stream.removeprefix("KV_")
    if subject.startswith("$KV."):
        return "KV write", parts[1]
    if subject.startswith("bastion.v1.audit."):
        return "audit", "bastion_audit"
    if subject.startswith("bastion.v1.events."):
        return "event", parts[3]
    if subject.startswith("bastion.v1.reply."):
        return "answer", "the caller"
    if subject.startswith("bastion.v1."):
        return "request", ".".join(parts[2:4])
    return "other", ".".join(parts[:4])


def counting(client: Client, counts: Counter[str]) -> None:
    """Count every message `client` publishes (JetStream's API requests go through
    `publish` too) by `kind_of`."""
    publish = client.publish

    async def counted(subject: str, payload: bytes = b"", *args: Any, **kwargs: Any) -> None:
        kind, what = kinds_of(subject)
        counts[kind] += 1
        counts[f"{kind}: {what}"] += 1
        await publish(subject, payload, *args, **kwargs)

    client.publish = counted  # type: ignore[method-assign]


@asynccontextmanager
async def serving(
    setup: Any, settings: BusSettings, counts: Counter[str] | None
) -> AsyncIterator[None]:
    async with (
        connect(settings, "bench-service") as client,
        setup(client, settings) as service,
        service.running(client, drain_timeout_s=5.0),
    ):
        if counts is not None:
            counting(client, counts)
        yield


async def measure(nats_url: str, root: Path, calls: int) -> list[tuple[str, Counter[str], float]]:
    workspace = sandbox_workspace(root / "work")
    (workspace / "notes.txt").write_text("a line of notes\n" * 64)
    sandbox_workspace(workspace)
    counts: Counter[str] = Counter()
    bus = BusSettings(nats_url=nats_url)
    async with AsyncExitStack() as stack:
        for setup, settings, counted in (
            (policy_service, PolicySettings(nats_url=nats_url), None),
            (sandbox_service, SandboxSettings(nats_url=nats_url, state_dir=str(root / "sb")), None),
            (orchestrator_service, OrchestratorSettings(nats_url=nats_url), counts),
        ):
            await stack.enter_async_context(serving(setup, settings, counted))
        client = await stack.enter_async_context(connect(bus, "bench"))
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(agent="bench", workspace=str(workspace), shell=True, autonomy="L3"),
            SessionInfo,
            timeout_s=30,
        )
        rows = []
        for tool, given in TOOLS.items():
            for n in range(calls + 2):
                if n == 2:
                    counts.clear()
                    cpu = time.process_time()
                made = dict(given, content=f"call {n}\n") if tool == "write_file" else given
                await call(client, session.session_id, tool, **made)
            rows.append((tool, Counter(counts), (time.process_time() - cpu) * 1000 / calls))
        return rows


def report(rows: list[tuple[str, Counter[str], float]], calls: int) -> None:
    print(f"per call, the mean of {calls} calls after 2 warm-up calls")
    print(f"{'tool':<12} " + " ".join(f"{c:>9}" for c in COLUMNS) + f" {'CPU ms':>8}")
    for tool, counts, cpu_ms in rows:
        cells = " ".join(f"{counts[c] / calls:>9.2f}" for c in COLUMNS)
        print(f"{tool:<12} {cells} {cpu_ms:>8.2f}")
    for tool, counts, _ in rows:
        detail = sorted((k, n) for k, n in counts.items() if ": " in k)
        print(f"{tool}: " + ", ".join(f"{k} {n / calls:.2f}" for k, n in detail))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="timed calls per tool")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_nats_server(Path(tmp) / "nats") as url:
        rows = anyio.run(measure, url, Path(tmp), args.calls)
    report(rows, args.calls)


if __name__ == "__main__":
    main()
