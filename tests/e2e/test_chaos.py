"""Chaos: `bastion up --replicas 2` under 200 calls from 20 sessions while every service is
killed (-9) in turn and restarted by `bastion up`. Afterwards every call ended with a
result or an explicit `uncertain`, no non-idempotent call ran twice, and no parked
approval or secret was lost.

A client retries a call that got no answer (`unavailable`, `timeout`) with the same
call_id, as an agent's runtime should: the call's record answers a call that already ran
with its outcome, and one whose first attempt got no answer is uncertain — whatever the
tool, none runs twice. Each session's `edit_file` calls append a marker before `END` in
`log.txt` — not idempotent: a second run would leave the marker twice.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from nats.aio.msg import Msg

from bastion.cli.discovery import list_instances
from bastion.cli.status import SERVICES
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalAnswer, ApprovalAnswered, ApprovalList, ApprovalQuery
from bastion.proto.errors import ErrorReply
from bastion.proto.session import OpenSession, SessionInfo, SessionLimits
from bastion.proto.tools import CallParked, CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, connect, request
from bastion.shared.errors import BastionError
from bastion.shared.statedir import find_bus_settings, read_run_record
from tests.helpers.owners import owned
from tests.helpers.running_up import bastion, running_up

pytestmark = pytest.mark.e2e

SESSIONS = 20
CALLS = 10
PARKED = 3
SECRET = "chaos-token-" + "x" * 20
TOKEN_PY = "import os\nprint('token', os.environ.get('CHAOS_TOKEN', 'none'))\n"
KILLS = (
    "orchestrator.1", "policy.1", "sandbox.1", "egress.1", "mcp.1",
    "vault.1", "orchestrator.2", "sandbox.2", "vault.2", "policy.2",
)  # fmt: skip
"""What is killed (-9) as each round of calls is under way: every service, some twice."""
assert len(KILLS) == CALLS
KILL_AFTER = 4
"""How many calls of a round are answered before the kill: the rest are in flight."""
RETRIED = ("unavailable", "timeout")
CALL_TIMEOUT_S = 12.0
WALL_S = 3.0
"""Each command's wall clock: a command whose sandbox service died is given up (uncertain,
or run again if not journaled) after it and the request timeout, not the default 120 s."""


def _step(i: int, session: int) -> tuple[str, dict[str, object]]:
    """The i-th call of a session: writes, appends, reads, echoes and a secret's lease (each
    round of calls has every kind)."""
    kind = (i + session) % 5
    if kind == 0:
        return "write_file", {"path": f"w{i}.txt", "content": f"s{session}-w{i}\n"}
    if kind == 1:
        return "edit_file", {"path": "log.txt", "old_string": "END", "new_string": f"m{i}\nEND"}
    if kind == 2:
        return "read_file", {"path": "log.txt"}
    if kind == 3:
        return "shell", {"command": f"sleep 0.2; echo s{session}-{i}"}
    return "skill_run", {"name": "secretive", "script": "scripts/token.py", "args": [str(i)]}


@pytest.fixture
def up_replicas(tmp_path: Path) -> Iterator[Path]:
    """`bastion up --replicas 2` with short timeouts, so a death costs seconds, not minutes."""
    short = {"BASTION_REQUEST_TIMEOUT_S": "4", "BASTION_TURN_TTL_S": "3"}
    with running_up(tmp_path / "state", "--replicas", "2", env=short) as state_dir:
        yield state_dir


async def _call(client: Client, session_id: str, call: ToolCall) -> CallResult:
    """The call until it is answered: one that got no answer is sent again, same call_id."""
    result: CallResult | None = None
    with anyio.move_on_after(90):
        while True:
            try:
                result = await request(
                    client, subjects.session_call(session_id), call, CallResult,
                    timeout_s=CALL_TIMEOUT_S,
                )  # fmt: skip
            except BastionError as error:
                result = error.to_reply()
            if not (isinstance(result, ErrorReply) and result.code in RETRIED):
                return result
            await anyio.sleep(0.2)
    raise AssertionError(f"{call} in session {session_id} got no answer but {result}")


async def _open(client: Client, workspace: Path, skills: Path, autonomy: str) -> str:
    ask = OpenSession(
        agent="chaos", workspace=str(workspace), shell=True, autonomy=autonomy,
        skills_dir=str(skills), limits=SessionLimits(wall_s=WALL_S),
    )  # fmt: skip
    info = await request(client, subjects.SESSION_OPEN, ask, SessionInfo, timeout_s=30)
    return info.session_id


async def _restarted(client: Client, state_dir: Path, name: str, dead: int) -> None:
    """Until `bastion up` has started `name` again and both instances of it answer."""
    service = name.split(".", maxsplit=1)[0]
    with anyio.fail_after(60):
        while True:
            record = read_run_record(state_dir)
            again = record is not None and record.children.get(name, dead) != dead
            if again and sum(i.name == service for i in await list_instances(client)) == 2:
                return
            await anyio.sleep(0.1)


async def _queue_groups(client: Client) -> dict[str, set[str]]:
    """The queue groups of each service's endpoints, over every instance that answers."""
    groups: dict[str, set[str]] = {}
    inbox = client.new_inbox()

    async def collect(msg: Msg) -> None:
        stats = json.loads(msg.data)
        for endpoint in stats["endpoints"]:
            groups.setdefault(stats["name"], set()).add(endpoint.get("queue_group", ""))

    subscription = await client.subscribe(inbox, cb=collect)
    await client.publish("$SRV.STATS", b"", reply=inbox)
    await anyio.sleep(0.5)
    await subscription.unsubscribe()
    return groups


def _skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    (root / "secretive" / "scripts").mkdir(parents=True)
    (root / "secretive" / "SKILL.md").write_text(
        "---\nname: secretive\nmetadata:\n  bastion-secrets: CHAOS_TOKEN\n---\nPrints it.\n"
    )
    (root / "secretive" / "scripts" / "token.py").write_text(TOKEN_PY)
    return root


async def _chaos(state_dir: Path, tmp_path: Path) -> None:
    skills = _skills(tmp_path)
    settings = find_bus_settings(None, state_dir, env={})
    results: dict[tuple[int, int], CallResult] = {}
    async with connect(settings, "chaos") as client:
        assert {i.name for i in await list_instances(client)} == set(SERVICES)
        assert len(await list_instances(client)) == 2 * len(SERVICES)
        assert await _queue_groups(client) == {name: {"q"} for name in SERVICES}
        sids = [await _open(client, tmp_path / f"s{n}", skills, "L3") for n in range(SESSIONS)]
        parked_sids = [await _open(client, tmp_path / f"p{n}", skills, "L2") for n in range(PARKED)]
        for sid in parked_sids:
            asked = await _call(client, sid, ToolCall(tool="write_file", input={
                "path": "approved.txt", "content": "approved\n"}))  # fmt: skip
            assert isinstance(asked, CallParked)

        for i, victim in enumerate(KILLS):
            some_answered = anyio.Event()

            async def one(n: int, i: int = i, answered: anyio.Event = some_answered) -> None:
                tool, tool_input = _step(i, n)
                call = ToolCall(tool=tool, input=tool_input, call_id=f"c{n}-{i}")
                results[n, i] = await _call(client, sids[n], call)
                if sum(key[1] == i for key in results) == KILL_AFTER:
                    answered.set()

            record = read_run_record(state_dir)
            assert record is not None
            pid = record.children[victim]
            async with anyio.create_task_group() as round_:
                for n in range(SESSIONS):
                    round_.start_soon(one, n)
                await some_answered.wait()  # the others are under way: now the death
                os.kill(pid, signal.SIGKILL)
            await _restarted(client, state_dir, victim, pid)

        listed = await request(
            client, subjects.APPROVALS_LIST, ApprovalQuery(), ApprovalList, timeout_s=30
        )
        waiting = [a for a in listed.approvals if a.session_id in parked_sids]
        assert len(waiting) == PARKED and {a.state for a in waiting} == {"pending"}
        for approval in waiting:
            answer = ApprovalAnswer(request_id=approval.request_id, approve=True, by="cli:chaos")
            answered = await request(
                client, subjects.APPROVALS_ANSWER, answer, ApprovalAnswered, timeout_s=30
            )
            assert isinstance(answered.result, ToolOutput), answered.result
        lease = await _call(client, sids[0], ToolCall(tool="skill_run", input={
            "name": "secretive", "script": "scripts/token.py", "args": ["after"]}))  # fmt: skip

    for n in range(PARKED):
        assert (tmp_path / f"p{n}" / "approved.txt").read_text() == "approved\n"
    assert isinstance(lease, ToolOutput) and "token [secret CHAOS_TOKEN]" in lease.text, lease
    _check(results, tmp_path)


def _check(results: dict[tuple[int, int], CallResult], tmp_path: Path) -> None:
    """Every call answered or uncertain; nothing journaled ran twice; what ran is there."""
    assert len(results) == SESSIONS * CALLS
    ended = {key: r.code for key, r in results.items() if isinstance(r, ErrorReply)}
    assert set(ended.values()) <= {"uncertain"}, ended
    for (n, i), result in results.items():
        tool, tool_input = _step(i, n)
        workspace = tmp_path / f"s{n}"
        if tool == "edit_file":
            markers = (workspace / "log.txt").read_text().splitlines().count(f"m{i}")
            assert markers <= 1, f"session {n}'s edit {i} ran {markers} times"
            assert markers == 1 or not isinstance(result, ToolOutput), (n, i)
        elif tool == "write_file" and isinstance(result, ToolOutput):
            assert (workspace / f"w{i}.txt").read_text() == tool_input["content"]
        elif tool == "skill_run" and isinstance(result, ToolOutput):
            assert "token [secret CHAOS_TOKEN]" in result.text, result.text


def test_two_hundred_calls_survive_every_service_killed_in_turn(
    up_replicas: Path, tmp_path: Path
) -> None:
    for name in [f"s{n}" for n in range(SESSIONS)] + [f"p{n}" for n in range(PARKED)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "log.txt").write_text("END\n")
        owned(tmp_path / name)
    status = bastion("status", "--wait", "30", "-o", "json", state_dir=up_replicas)
    record = read_run_record(up_replicas)
    assert status.returncode == 0 and record is not None, status.stdout + status.stderr
    listed = {i["pid"] for i in json.loads(status.stdout)["items"]}
    assert listed == {str(pid) for pid in record.children.values()}  # 2 of each, all listed
    added = bastion("secret", "add", "CHAOS_TOKEN", state_dir=up_replicas, stdin=SECRET)
    assert added.returncode == 0, added.stderr
    anyio.run(_chaos, up_replicas, tmp_path)
