"""Cancelling a running call: `session.<id>.cancel` stops the call where it runs — the
orchestrator answers it `cancelled`, the sandbox kills the command — and says so to every
later sending of its call id; a call already ended, or never made, is a no-op answer."""

from __future__ import annotations

import getpass
import json
import os
import signal
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import ByteReceiveStream, SocketStream
from nats.aio.msg import Msg

from bastion.egress.service import egress_service
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.events import CallFinished
from bastion.proto.tools import CallResult, ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.approvals import records_of
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.cancels import call_with_id, cancel, gone, until
from tests.helpers.egress import RESOLVER, egress_settings, guard_network
from tests.helpers.front_door import DoorOf, mcp_client, new_token, text_of
from tests.helpers.hookgate import HookGate, send
from tests.helpers.loopback import serving_on_loopback
from tests.helpers.mcp_gateway import add, mcp_plane
from tests.helpers.mcp_upstream import SERVERS, apart, stdio_spec
from tests.helpers.session import open_session, orchestrator
from tests.helpers.sleepers import sleeping, unique_duration

pytestmark = pytest.mark.anyio

BASTION = [sys.executable, "-m", "bastion.cli"]
OPERATOR_TOKEN = "op-token-0123456789abcdef"
"""The `door_of` fixture's operator token (label `operator`)."""


async def _all_of(stream: ByteReceiveStream | None) -> str:
    assert stream is not None
    read = b""
    async for chunk in stream:
        read += chunk
    return read.decode()


async def test_a_cancelled_sleep_leaves_no_process_and_its_call_id_answers_cancelled(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    duration = unique_duration()
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        kept = await call_with_id(client, sid, "c-0", "shell", command="echo kept > /tmp/keep")
        assert isinstance(kept, ToolOutput)
        results: list[CallResult] = []

        async def sleeper() -> None:
            results.append(
                await call_with_id(client, sid, "c-1", "shell", command=f"sleep {duration}")
            )

        async with anyio.create_task_group() as group:
            group.start_soon(sleeper)
            await until(lambda: bool(sleeping(duration)), "the sleep started")
            answer = await cancel(client, sid, "c-1", "cli:tester")
        assert answer.outcome == "cancelled", answer.message
        assert "cli:tester" in answer.message
        [result] = results
        assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED, result
        assert "cancelled by cli:tester" in result.message
        await gone(lambda: sleeping(duration))

        again = await call_with_id(client, sid, "c-1", "shell", command=f"sleep {duration}")
        assert isinstance(again, ErrorReply) and again.code == codes.CANCELLED
        assert "cli:tester" in again.message
        assert not sleeping(duration)  # answered from its record: not made again

        nxt = await call_with_id(client, sid, "c-2", "shell", command="cat /tmp/keep")
        # the next call runs, in the same warm sandbox: only the command was ended
        assert isinstance(nxt, ToolOutput) and "kept" in nxt.text, nxt

        ended = await cancel(client, sid, "c-2", "cli:tester")
        assert ended.outcome == "ended"
        unknown = await cancel(client, sid, "never-made", "cli:tester")
        assert unknown.outcome == "unknown"
        audited = [record for _, record in await records_of(client, session.tenant, sid)]
    told = [(r.action, r.by) for r in audited if r.call_id == "c-1" and r.action == "cancel"]
    assert told == [("cancel", "cli:tester")]  # the no-op cancels are not recorded
    results_of_c1 = [r.outcome for r in audited if r.call_id == "c-1" and r.action == "result"]
    assert results_of_c1 == [codes.CANCELLED, codes.CANCELLED]  # its run, then its resending


async def test_a_cancel_in_an_unknown_session_is_not_found(client: Client, plane_of: Plane) -> None:
    async with plane_of():
        with pytest.raises(RemoteError) as raised:
            await cancel(client, "0" * 16, "c-1", "cli:tester")
    assert raised.value.code == codes.NOT_FOUND


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # notifications/cancelled; a closed stream
async def test_an_mcp_clients_cancel_kills_its_command_and_names_the_agent(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path, mode: str
) -> None:
    duration = unique_duration()
    finished: list[CallFinished] = []

    async def seen(msg: Msg) -> None:
        finished.append(decode(msg.data, CallFinished))

    await client.subscribe(subjects.event("call_finished", "*"), cb=seen)
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, mode) as mcp:
            async with anyio.create_task_group() as group:

                async def sleeper() -> None:
                    await mcp.call_tool("shell", {"command": f"sleep {duration}"})

                group.start_soon(sleeper)
                await until(lambda: bool(sleeping(duration)), "the sleep started")
                group.cancel_scope.cancel()  # the SDK sends `notifications/cancelled`
            await gone(lambda: sleeping(duration))
            await until(lambda: bool(finished), "the call finished")
            after = await mcp.call_tool("shell", {"command": "echo next-call"})
        [cancelled, *_] = finished
        again = await call_with_id(
            client, cancelled.session_id, cancelled.call_id, "shell", command="true"
        )
    assert cancelled.error_code == codes.CANCELLED
    assert not after.is_error and "next-call" in text_of(after)
    assert isinstance(again, ErrorReply) and again.code == codes.CANCELLED
    assert "cancelled by mcp:claude" in again.message


async def test_an_operator_cancels_a_call_over_http_and_unknown_ones_are_404(
    client: Client, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    duration = unique_duration()
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with plane_of(), door_of() as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        route = f"/v1/sessions/{sid}/calls/h-1/cancel"
        results: list[CallResult] = []

        async def sleeper() -> None:
            results.append(
                await call_with_id(client, sid, "h-1", "shell", command=f"sleep {duration}")
            )

        async with anyio.create_task_group() as group:
            group.start_soon(sleeper)
            await until(lambda: bool(sleeping(duration)), "the sleep started")
            refused = await http.post(route)  # no operator token
            assert refused.status_code == 401
            assert sleeping(duration)
            cancelled = await http.post(route, headers=headers)
        await gone(lambda: sleeping(duration))
        ended = await http.post(route, headers=headers)
        no_call = await http.post(f"/v1/sessions/{sid}/calls/nope/cancel", headers=headers)
        no_session = await http.post(f"/v1/sessions/{'0' * 16}/calls/h-1/cancel", headers=headers)
        not_an_id = await http.post("/v1/sessions/a.b/calls/h-1/cancel", headers=headers)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["outcome"] == "cancelled"
    [result] = results
    assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED
    assert "cancelled by http:operator" in result.message
    assert ended.status_code == 200 and ended.json()["outcome"] == "ended"
    for missing in (no_call, no_session, not_an_id):
        assert missing.status_code == 404, missing.text
        assert missing.headers["content-type"] == "application/problem+json"
        assert missing.json()["code"] == "not_found"


async def test_ctrl_c_in_agent_run_cancels_the_call_and_exits_130(
    client: Client, plane_of: Plane, nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    duration = unique_duration()
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool": "shell", "input": {"command": f"sleep {duration}"}},
                {"tool": "shell", "input": {"command": "touch never-made"}},
            ]
        )
    )
    argv = [
        *BASTION, "agent", "run", "--nats", nats_url, "--script", str(script),
        "--workspace", str(workspace), "--shell", "--autonomy", "L3",
        "--state-dir", str(tmp_path / "cli-state"),
    ]  # fmt: skip
    async with plane_of():
        async with await anyio.open_process(argv) as process:
            await until(lambda: bool(sleeping(duration)), "the sleep started", tries=1200)
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(60):
                status = await process.wait()
            out, err = await _all_of(process.stdout), await _all_of(process.stderr)
        await gone(lambda: sleeping(duration))
    assert status == 130, (out, err)
    assert f"cancelled by cli:{getpass.getuser()}" in out
    assert "← error (cancelled)" in out
    assert "interrupted" in err and "was cancelled" in err
    assert not (workspace / "never-made").exists()


async def test_a_cancelled_upstream_call_is_cancelled_upstream(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    record = tmp_path / "upstream-events"
    record.touch()

    def lines() -> list[str]:
        return record.read_text().splitlines()

    spec = stdio_spec(SERVERS / "cancellable.py", apart(tmp_path), str(record))
    async with mcp_plane(run_service, bus_settings, tmp_path / "state"):
        await add(client, "waiter", spec)
        session = await open_session(client, autonomy="L5", mcp=["waiter"])
        sid = session.session_id
        results: list[CallResult] = []

        async def waiting() -> None:
            results.append(await call_with_id(client, sid, "u-1", "waiter_wait", seconds=600))

        async with anyio.create_task_group() as group:
            group.start_soon(waiting)
            await until(lambda: any(line.startswith("started") for line in lines()), "started")
            answer = await cancel(client, sid, "u-1", "http:ops")
        await until(lambda: any(line.startswith("cancelled") for line in lines()), "told")
        quick = await call_with_id(client, sid, "u-2", "waiter_wait", seconds=0)
        changes: list[CallResult] = []

        async def changing() -> None:
            changes.append(await call_with_id(client, sid, "u-3", "waiter_change", seconds=600))

        async with anyio.create_task_group() as group:
            group.start_soon(changing)
            await until(lambda: len([x for x in lines() if x.startswith("started")]) == 3, "3")
            await cancel(client, sid, "u-3", "cli:tester")
        identical = await call_with_id(client, sid, "u-4", "waiter_change", seconds=600)
    assert answer.outcome == "cancelled", answer.message
    [result] = results
    assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED
    assert "cancelled by http:ops" in result.message
    started = next(line.split()[1] for line in lines() if line.startswith("started"))
    assert f"cancelled {started}" in lines()  # the request the call was, by its id
    assert isinstance(quick, ToolOutput) and "waited 0 s" in quick.text
    [changed] = changes
    assert isinstance(changed, ErrorReply) and changed.code == codes.CANCELLED
    # the journal keeps it cancelled: the identical change under a new call id is not made
    assert isinstance(identical, ErrorReply) and identical.code == codes.CANCELLED, identical
    assert "cancelled while it ran" in identical.message and "cli:tester" in identical.message
    assert len([x for x in lines() if x.startswith("started")]) == 3


async def _sleep_cancelled(client: Client, sid: str, call_id: str) -> None:
    """A `sleep` made under `call_id` and cancelled while it runs: it must answer so, and
    leave no process."""
    duration = unique_duration()
    results: list[CallResult] = []

    async def sleeper() -> None:
        results.append(
            await call_with_id(client, sid, call_id, "shell", command=f"sleep {duration}")
        )

    async with anyio.create_task_group() as group:
        group.start_soon(sleeper)
        await until(lambda: bool(sleeping(duration)), "the sleep started")
        answer = await cancel(client, sid, call_id, "cli:tester")
    assert answer.outcome == "cancelled", answer.message
    [result] = results
    assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED
    await gone(lambda: sleeping(duration))


async def test_with_two_orchestrators_whichever_runs_the_call_cancels_it(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    workspace: Path,
) -> None:
    """Calls and cancels each go to either replica (a queue group): over eight rounds the
    cancel reaches the replica not running the call in all but 1 in 256 runs, and every
    round must end cancelled whichever it reached."""
    url = bus_settings.nats_url
    sandbox = SandboxSettings(nats_url=url, state_dir=str(sandbox_state_dir))
    async with (
        run_service(policy_service, PolicySettings),
        run_service(sandbox_service, sandbox),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
    ):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        for round_ in range(8):
            await _sleep_cancelled(client, session.session_id, f"r-{round_}")


async def _fetch_cancelled(
    client: Client, sid: str, call_id: str, page: str, asked: list[bytes]
) -> None:
    """A fetch of `page` (which never answers) cancelled once the page was asked for."""
    results: list[CallResult] = []
    before = len(asked)

    async def fetching() -> None:
        results.append(await call_with_id(client, sid, call_id, "fetch_url", url=page))

    async with anyio.create_task_group() as group:
        group.start_soon(fetching)
        await until(lambda: len(asked) > before, "the page was asked for")
        answer = await cancel(client, sid, call_id, "http:ops")
    assert answer.outcome == "cancelled", answer.message
    [result] = results
    assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED
    assert "this fetch_url call was cancelled by http:ops" in result.message


async def test_with_two_orchestrators_the_one_running_a_fetch_stops_waiting_for_it(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page that never comes: the egress service is not told of cancels, so only the
    orchestrator running the call can end it. Each round's call and cancel go to either
    replica; in all but 1 in 64 runs some round's cancel reaches the replica not running
    the call, which must then be told on `calls.cancel` for the round to end cancelled."""
    off_loopback = guard_network(monkeypatch)
    asked: list[bytes] = []

    async def never_answers(stream: SocketStream) -> None:
        async with stream:
            asked.append(await stream.receive())
            await anyio.sleep_forever()

    url = bus_settings.nats_url
    async with (
        run_service(policy_service, PolicySettings),
        run_service(egress_service(RESOLVER), egress_settings(url, "127.0.0.0/8")),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
        serving_on_loopback(never_answers) as port,
    ):
        session = await open_session(client, autonomy="L5", web=True)
        for round_ in range(6):
            page = f"http://public.test:{port}/{round_}"
            await _fetch_cancelled(client, session.session_id, f"f-{round_}", page, asked)
    assert off_loopback == []


async def test_a_cancelled_run_tests_kills_the_tests_it_runs(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    duration = unique_duration()
    tests_file = workspace / "test_slow.py"
    tests_file.write_text(
        "import subprocess\nimport unittest\n\n\n"
        "class Slow(unittest.TestCase):\n"
        "    def test_slow(self):\n"
        f"        subprocess.run(['sleep', '{duration}'], check=True)\n"
    )
    os.chown(tests_file, 1000, 1000)
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        results: list[CallResult] = []

        async def testing() -> None:
            results.append(await call_with_id(client, session.session_id, "t-1", "run_tests"))

        async with anyio.create_task_group() as group:
            group.start_soon(testing)
            await until(lambda: bool(sleeping(duration)), "the tests started", tries=1200)
            answer = await cancel(client, session.session_id, "t-1", "cli:tester")
        await gone(lambda: sleeping(duration))
    assert answer.outcome == "cancelled", answer.message
    [result] = results
    assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED


async def test_a_cancelled_run_code_kills_its_program_and_the_session_goes_on(
    client: Client, plane_of: Plane, workspace: Path
) -> None:
    """A program waiting in its own sandbox ends with the cancel of its call (and with it
    the tenant's sandbox slot it held), and the session's next command runs."""
    duration = unique_duration()
    program = f"import subprocess\nsubprocess.run(['sleep', '{duration}'])\n"
    async with plane_of():
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        results: list[CallResult] = []

        async def coding() -> None:
            results.append(await call_with_id(client, sid, "r-1", "run_code", code=program))

        async with anyio.create_task_group() as group:
            group.start_soon(coding)
            await until(lambda: bool(sleeping(duration)), "the program started")
            answer = await cancel(client, sid, "r-1", "cli:tester")
        await gone(lambda: sleeping(duration))
        assert answer.outcome == "cancelled", answer.message
        [result] = results
        assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED, result
        after = await call_with_id(client, sid, "r-2", "shell", command="echo next")
        assert isinstance(after, ToolOutput) and after.text.endswith("next"), after


async def test_a_cancel_told_before_the_call_runs_stops_it_as_it_begins(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    plane: None,
    workspace: Path,
) -> None:
    """Held at its before-tool hook the call has a record but nothing runs yet: the cancel
    is answered `cancelling`, and once the hook lets it go it is stopped as it begins."""
    gate = HookGate()
    await gate.register(client)
    async with orchestrator(run_service, bus_settings):
        session = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        sid = session.session_id
        with anyio.fail_after(60):
            sent = await send(client, sid, "shell", call_id="g-1", command="touch ran-anyway")
            await gate.until_held(1)
            answer = await cancel(client, sid, "g-1", "mcp:claude")
            await gate.release()
            result = await sent.answer()
    assert answer.outcome == "cancelling", answer.message
    assert isinstance(result, ErrorReply) and result.code == codes.CANCELLED, result
    assert "cancelled by mcp:claude" in result.message
    assert not (workspace / "ran-anyway").exists()
