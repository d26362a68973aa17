"""`bastion up --replicas 3`: a tenant's calls per second are its rate across the three
orchestrators, not three times it."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.session import OpenSession, SessionInfo
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, connect, request
from bastion.shared.errors import RemoteError
from bastion.shared.statedir import find_bus_settings
from tests.helpers.owners import owned
from tests.helpers.running_up import running_up

pytestmark = pytest.mark.e2e


async def _call(client: Client, session_id: str) -> CallResult:
    try:
        result: CallResult = await request(
            client,
            subjects.session_call(session_id),
            ToolCall(tool="read_file", input={"path": "a.txt"}),
            CallResult,
            timeout_s=60,
        )
    except RemoteError as error:
        return error.to_reply()
    return result


async def _burst(state_dir: Path, workspace: Path) -> list[CallResult]:
    """30 calls of one tenant from six sessions at once, as fast as the plane answers."""
    results: list[CallResult] = []
    async with connect(find_bus_settings(None, state_dir), "e2e") as client:
        sessions: list[SessionInfo] = [
            await request(
                client,
                subjects.SESSION_OPEN,
                OpenSession(agent="e2e", tenant="acme", workspace=str(workspace)),
                SessionInfo,
                timeout_s=30,
            )
            for _ in range(6)
        ]

        async def calls(session_id: str) -> None:
            for _ in range(5):
                results.append(await _call(client, session_id))

        with anyio.fail_after(90):
            async with anyio.create_task_group() as load:
                for session in sessions:
                    load.start_soon(calls, session.session_id)
    return results


def test_three_replicas_do_not_triple_a_tenant_s_rate(tmp_path: Path) -> None:
    workspace = owned(tmp_path / "work")
    (workspace / "a.txt").write_text("a\n")
    os.chown(workspace / "a.txt", 1000, 1000)
    # One token, a hundredth of one back per second: within the burst's 90 s at most, no
    # second token is whole, so one call gets through; three replicas with a bucket each
    # (or a third of the rate each, as `--replicas` once gave) would let three through.
    env = {"BASTION_TENANT_CALLS_PER_S": "0.01"}
    with running_up(tmp_path / "state", "--replicas", "3", env=env) as state_dir:
        results = anyio.run(_burst, state_dir, workspace)
    refused = [r for r in results if isinstance(r, ErrorReply)]
    assert len([r for r in results if isinstance(r, ToolOutput)]) == 1
    assert len(refused) == 29
    assert all(r.code == codes.RATE_LIMITED for r in refused), refused
    assert "over its quota of 0.01 calls per second" in refused[0].message
