"""`run_code`: a Python program calling the session's tools that read, through real NATS,
policy, orchestrator and a bubblewrap sandbox; each call it makes is one of the session's
own, decided, journaled, audited under its parent, and refused when it would write."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from bastion.orchestrator.coderun import MAX_OUTPUT
from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply
from bastion.proto.journal import CallRecord
from bastion.proto.tools import ToolOutput
from bastion.sandbox.runcode import MAX_CALLS
from bastion.shared.bus import Client
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import records_of
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session, orchestrator

REFUSED = "run_code calls only tools that read; make the write_file call yourself"


def fifty_files(workspace: Path) -> None:
    for n in range(50):
        (workspace / "src").mkdir(exist_ok=True)
        (workspace / "src" / f"f{n:02}.txt").write_text("unsafe\n" * (n % 3))
    owned(workspace)


async def run(client: Client, workspace: Path, code: str, **session: object) -> tuple[str, object]:
    opened = await open_session(
        client, workspace=str(workspace), shell=True, autonomy="L3", **session
    )
    return opened.session_id, await call(client, opened.session_id, "run_code", code=code)


READ_FIFTY = """
total = 0
paths = tools.find_files(pattern="src/*.txt").split()
for path in paths:
    total += tools.read_file(path=path).count("unsafe")
print("files:", len(paths), "unsafe:", total)
"""


async def test_a_program_reads_fifty_files_in_one_call(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    fifty_files(workspace)
    async with orchestrator(run_service, bus_settings):
        _, result = await run(client, workspace, READ_FIFTY)
    assert isinstance(result, ToolOutput), result
    assert result.text == f"files: 50 unsafe: {sum(n % 3 for n in range(50))}\n"
