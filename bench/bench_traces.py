"""Where a call's time goes, hop by hop, read from the traces the plane exports.

It starts an OTLP/HTTP receiver in this process and `bastion up` exporting to it (the
standard `OTEL_*` variables), makes N `shell true` calls through the MCP front door with
the SDK's client, stops the plane (which flushes every span), and from each call's trace
prints:
- the median and p99 of each span on the path (front door, orchestrator, policy, sandbox,
  the command in its sandbox), and
- each hop's own time (its span less the spans it waits on) and its share of the whole
  call as the front door saw it; `bus` is NATS and the (de)coding on both sides of each
  request: a client span's time less its server span's.

Usage: python -m bench.bench_traces [--calls N]   (from the repository root)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bastion.cli.natsserver import free_port
from bench.common import bastion_up, percentile, sandbox_workspace
from tests.helpers.otlp import ReceivedSpan, otlp_receiver

DOOR = "tools/call shell"
PATH = [
    (DOOR, "front door (mcp)"),
    ("process bastion.v1.session.*.call", "orchestrator"),
    ("process bastion.v1.policy.decide", "policy"),
    ("process bastion.v1.sandbox.exec", "sandbox service"),
    ("sandbox.run", "command in its sandbox"),
]
HOP_OF_SERVICE = {
    "bastion-mcp": "front door",
    "bastion-orchestrator": "orchestrator",
    "bastion-policy": "policy",
    "bastion-sandbox": "sandbox service",
}
HOPS = ["front door", "orchestrator", "policy", "sandbox service", "exec", "bus"]


async def shell_calls(url: str, token: str, calls: int) -> None:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120)
    )
    async with (
        http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as mcp,
    ):
        for _ in range(calls):
            ran = await mcp.call_tool("shell", {"command": "true"})
            if ran.is_error:
                raise SystemExit(f"shell failed: {ran.content}")


def hop_times(spans: list[ReceivedSpan]) -> dict[str, float]:
    """Each hop's own seconds in one call's trace; they add up to the front door's span.

    A service's own time is the time of its spans that its caller waits on (those whose
    parent is in another service, or none) less the requests it waits on in turn.
    """
    by_id = {s.span_id: s for s in spans}
    answered = {s.parent_id: s for s in spans if s.kind == "consumer" and s.parent_id in by_id}
    own: dict[str, float] = defaultdict(float)
    for span in spans:
        hop = HOP_OF_SERVICE.get(span.service, span.service)
        parent = by_id.get(span.parent_id)
        if parent is None or parent.service != span.service:
            own[hop] += span.duration_s
        served = answered.get(span.span_id)
        if served is not None:
            own[hop] -= span.duration_s
            own["bus"] += span.duration_s - served.duration_s
    [run] = [s for s in spans if s.name == "sandbox.run"]
    own["sandbox service"] -= run.duration_s
    own["exec"] = run.duration_s
    [door] = [s for s in spans if s.name == DOOR]
    own["total"] = door.duration_s
    return own


def report(traces: list[list[ReceivedSpan]]) -> None:
    durations: dict[str, list[float]] = defaultdict(list)
    hops: dict[str, list[float]] = defaultdict(list)
    for spans in traces:
        for span in spans:
            durations[span.name].append(span.duration_s * 1000)
        for hop, seconds in hop_times(spans).items():
            hops[hop].append(seconds * 1000)
    print(f"{len(traces)} calls, one trace each\n")
    print(f"{'span':<32}{'hop':<26}{'median ms':>10}{'p99 ms':>10}")
    for name, hop in PATH:
        middle, p99 = statistics.median(durations[name]), percentile(durations[name], 0.99)
        print(f"{name:<32}{hop:<26}{middle:>10.2f}{p99:>10.2f}")
    total = statistics.median(hops["total"])
    print(f"\n{'own time of each hop':<32}{'median ms':>10}{'p99 ms':>10}{'share':>8}")
    for hop in HOPS:
        samples = hops[hop]
        middle = statistics.median(samples)
        share = 100 * statistics.median(h / t for h, t in zip(samples, hops["total"], strict=True))
        print(f"{hop:<32}{middle:>10.2f}{percentile(samples, 0.99):>10.2f}{share:>7.1f}%")
    print(f"{'total (front door span)':<32}{total:>10.2f}{percentile(hops['total'], 0.99):>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, otlp_receiver() as receiver:
        state_dir, workspace = Path(tmp) / "state", sandbox_workspace(Path(tmp) / "work")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BASTION_", "OTEL_"))}
        env |= {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        port = free_port()
        with bastion_up(state_dir, "--http-port", str(port), env=env):
            created = subprocess.run(
                [sys.executable, "-m", "bastion.cli", "token", "create", "--agent", "bench",
                 "--autonomy", "L3", "--workspace", str(workspace), "--shell",
                 "--state-dir", str(state_dir)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            token = created.stdout.splitlines()[0]
            anyio.run(shell_calls, f"http://127.0.0.1:{port}", token, args.calls)
        # `bastion up` has stopped: every service flushed its spans on the way out.
        doors = [s for s in receiver.spans if s.name == DOOR]
        report([receiver.trace(door.trace_id) for door in doors])


if __name__ == "__main__":
    main()
