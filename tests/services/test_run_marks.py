"""A run's end is told after the calls the session has running: a front-door client that
went away mid-call must not have run-end hooks judge a workspace its command still changes."""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio

from bastion.proto import subjects
from bastion.proto.hooks import RunMark, RunMarked
from bastion.proto.tools import CallResult, ToolOutput
from bastion.shared.bus import Client, request
from tests.helpers.approvals import records_of
from tests.helpers.bus import Plane
from tests.helpers.cancels import call_with_id, until
from tests.helpers.session import open_session
from tests.helpers.sleepers import sleeping


async def test_a_run_end_told_while_a_call_runs_is_recorded_after_the_calls_result(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    duration = f"1.{secrets.randbelow(10**9):09d}"  # a second and a half, ours alone
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        results: list[CallResult] = []

        async def running() -> None:
            results.append(
                await call_with_id(
                    client, sid, "w-1", "shell", command=f"sleep {duration}; echo late > late.txt"
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(running)
            await until(lambda: bool(sleeping(duration)), "the command started")
            await request(
                client,
                subjects.SESSION_RUN,
                RunMark(session_id=sid, event="run_end", ended="done"),
                RunMarked,
                timeout_s=60,
            )
            ended_with_file = (workspace / "late.txt").exists()
        audited = [record.action for _, record in await records_of(client, session.tenant, sid)]
    [result] = results
    assert isinstance(result, ToolOutput), result
    assert ended_with_file  # run-end was answered only once the command had ended
    assert audited.index("run_end") > audited.index("result"), audited
