"""One tenant's secrets slow no other tenant: a tenant with ten values in the vault floods
the sandbox service with reads of a 256 KiB file (each answer cut of every form of every
value), and another tenant's read, asked once the first of them is answered (the others
being cut), is answered before most of them.

An attack review found the cuts made on the service's event loop, each costing
the text's size times the tenant's forms (~250 ms for 256 KiB and ten values): six such
reads took another tenant's `shell echo` from 0.05 s to 1.26 s. Nothing here is timed: the
answers' order is the evidence.

Real NATS, vault and sandbox services in this process.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio

from bastion.proto import subjects
from bastion.proto.sandbox import FileResult, ReadFile
from bastion.proto.toolinput import ReadFileInput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.vault import add, key_file, vault_settings

FLOODING = "flood"
QUIET = "quiet"
VALUES = 10
READS = 40
SMALL = "     1\thello"
"""The flooding tenant's reads asked at once: each one's cut queues behind the one before."""


async def _read(client: Client, workspace: Path, tenant: str, path: str) -> str:
    asked = ReadFile(
        session_id=secrets.token_hex(8),
        workspace=str(workspace),
        tenant=tenant,
        input=ReadFileInput(path=path, limit=100_000),
    )
    answer: FileResult = await request(
        client, subjects.SANDBOX_FILES, asked, FileResult, timeout_s=600
    )
    return answer.text


async def test_a_tenants_flood_of_large_cuts_does_not_hold_up_another_tenants_read(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path, workspace: Path
) -> None:
    values = [f"Tok-{secrets.token_urlsafe(24)}" for _ in range(VALUES)]
    line = "x" * 60 + " a line of a large file, with no value in it at all\n"
    (workspace / "large.txt").write_text(f"token: {values[3]}\n" + line * (256 * 1024 // len(line)))
    (workspace / "small.txt").write_text("hello\n")
    owned(workspace)
    sandbox = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    answered: list[str] = []
    async with (
        run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "vault"))),
        run_service(sandbox_service, sandbox),
    ):
        for number, value in enumerate(values):
            await add(client, f"TOKEN_{number}", value.encode(), tenant=FLOODING)
        # Each tenant's values fetched and its cuts made ready before the flood.
        first = await _read(client, workspace, FLOODING, "large.txt")
        assert await _read(client, workspace, QUIET, "small.txt") == SMALL

        cutting = anyio.Event()

        async def flood() -> None:
            text = await _read(client, workspace, FLOODING, "large.txt")
            assert text == first
            answered.append(FLOODING)
            cutting.set()

        async def quiet() -> None:
            await cutting.wait()  # the flood's first answer is in: the rest are being cut
            assert await _read(client, workspace, QUIET, "small.txt") == SMALL
            answered.append(QUIET)

        async with anyio.create_task_group() as group:
            for _ in range(READS):
                group.start_soon(flood)
            group.start_soon(quiet)

    assert "token: [secret TOKEN_3]" in first and values[3] not in first
    assert len(answered) == READS + 1
    assert answered.index(QUIET) < READS // 2, answered


async def test_a_tenants_flood_of_large_reads_waits_behind_its_own(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path, workspace: Path
) -> None:
    """Without any value to cut: a large read (past what is answered at once) runs in a
    worker thread in its tenant's turn, so forty of one tenant are read one after another
    and another tenant's large read, asked once the first is answered, is not queued
    among them. Before, each ran in a worker thread of its own, forty at once, and the
    other tenant's read came among the last."""
    line = "x" * 60 + " a line of a large file, with no value in it at all\n"
    (workspace / "large.txt").write_text(line * (256 * 1024 // len(line)))
    owned(workspace)
    sandbox = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    answered: list[str] = []
    async with run_service(sandbox_service, sandbox):
        first = await _read(client, workspace, FLOODING, "large.txt")
        reading = anyio.Event()

        async def flood() -> None:
            assert await _read(client, workspace, FLOODING, "large.txt") == first
            answered.append(FLOODING)
            reading.set()

        async def quiet() -> None:
            await reading.wait()  # the flood's first answer is in: the rest are being read
            assert await _read(client, workspace, QUIET, "large.txt") == first
            answered.append(QUIET)

        async with anyio.create_task_group() as group:
            for _ in range(READS):
                group.start_soon(flood)
            group.start_soon(quiet)

    assert len(answered) == READS + 1
    assert answered.index(QUIET) < READS // 2, answered
