"""Bounds one caller cannot push past to hurt another: nesting, searches, sessions, CPU, disk.

Each test makes the attack through the bus, as a caller would, and asserts the bound held
with a typed answer that says what to do.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from bastion.mcp.service import McpSettings
from bastion.mcp.service import setup as mcp_setup
from bastion.orchestrator.service import OrchestratorSettings, orchestrator_service
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.sandbox import FileResult, SearchFiles
from bastion.sandbox.service import SandboxSettings, sandbox_service
from bastion.shared.bus import Client, request
from bastion.shared.codec import MAX_NESTING, decode, encode
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings
from tests.conftest import ServiceRunner, raw_request

SESSION = "0123456789abcdef"

# --- input nested deeper than anything parses ------------------------------------------


def nested(depth: int, kind: str, **fields: object) -> bytes:
    """A message whose last value (a None at the end of the last field given) becomes an
    array nested `depth` deep: built as bytes, since no encoder makes one that deep."""
    shallow = encode({"kind": kind, **fields})
    assert shallow.endswith(b"\xc0")
    return shallow[:-1] + b"\x91" * depth + b"\xc0"


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 10_000])
async def test_input_nested_too_deep_is_a_bad_request_on_each_service(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, depth: int
) -> None:
    cases = [
        (
            orchestrator_service,
            OrchestratorSettings(nats_url=bus_settings.nats_url),
            subjects.session_call("0123456789abcdef"),
            nested(depth, "tool.call", tool="shell", input={"x": None}),
        ),
        (
            mcp_setup,
            McpSettings(nats_url=bus_settings.nats_url, http_listen="127.0.0.1:0"),
            subjects.MCP_CALL,
            nested(
                depth,
                "mcp.call",
                tenant="acme",
                session_id="0123456789abcdef",
                call_id="c1",
                server="s",
                arguments={"x": None},
            ),
        ),
    ]
    for setup, settings, subject, payload in cases:
        async with run_service(setup, settings):
            reply = await raw_request(client, subject, payload)
        error = decode(reply.data, ErrorReply)
        assert error.code == codes.BAD_REQUEST, (subject, error)
        assert f"nested more than {MAX_NESTING} deep" in error.message


# --- one tenant's searches holding every search worker -------------------------------------

BACKTRACKS = "(a+)+$"
"""Against a long run of `a` ending in another letter, it backtracks for ever."""


def owned_workspace(root: Path, name: str, files: dict[str, str]) -> Path:
    """A workspace owned by an unprivileged uid, as a sandbox service running as root takes."""
    path = root / name
    path.mkdir()
    for file, text in files.items():
        (path / file).write_text(text)
        os.chown(path / file, 1000, 1000)
    os.chown(path, 1000, 1000)
    return path


async def in_flight(service: Service, endpoint: str, count: int) -> None:
    """Wait until `count` requests are at work in the endpoint (20 s at most)."""
    for _ in range(2000):
        if service.endpoints[endpoint].in_flight >= count:
            return
        await anyio.sleep(0.01)
    raise AssertionError(f"{count} requests never were at work in {endpoint}")


async def search(client: Client, where: Path, pattern: str, tenant: str) -> str:
    message = SearchFiles(
        session_id=SESSION, workspace=str(where), pattern=pattern, context=0, tenant=tenant
    )
    found = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=30)
    return str(found.text)


async def test_a_tenant_flooding_catastrophic_searches_does_not_hold_another_tenants_search(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(tmp_path / "state"),
        # Longer than the other tenant's request waits: were it queued behind the flood,
        # its request would time out.
        search_timeout_s=120,
        search_workers_per_tenant=1,
    )
    flooder = owned_workspace(tmp_path, "a", {"bait.txt": "a" * 64 + "!\n"})
    other = owned_workspace(tmp_path, "b", {"notes.txt": "one\ntwo\n"})
    # More searches than anyio's shared pool of workers (one per CPU) holds at once.
    flood = (os.cpu_count() or 2) + 1
    async with (
        run_service(sandbox_service, settings) as service,
        anyio.create_task_group() as flooding,
    ):
        for _ in range(flood):
            flooding.start_soon(search, client, flooder, BACKTRACKS, "acme")
        await in_flight(service, "files", flood)
        assert await search(client, other, "two", "globex") == "notes.txt:2: two"
        flooding.cancel_scope.cancel()
