"""A call of any length returns its result exactly once.

The bus's reply window (`BASTION_REPLY_WINDOW_S`, the server's `allow_responses.expires`)
is set to two seconds here, and every service runs as its own NATS user, as `bastion up`
runs them: a command, a page and an upstream tool that each take longer than the window
still answer, once. A call sent again with its call id — while it runs, after it ended —
is answered with the outcome of its one run: a line it appends is there once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
import pytest
from anyio.abc import SocketStream, TaskStatus

from bastion.cli.discovery import list_instances
from bastion.cli.natsserver import free_port, serving
from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.mcp import AddServer, McpReview
from bastion.proto.session import OpenSession, SessionInfo, SessionLimits
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, connect, request
from bastion.shared.errors import BastionError
from bastion.shared.natsconfig import SERVER_FILE, UserCredentials, service_env, write_nats_config
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings, load_settings
from bastion.shared.statedir import find_bus_settings, read_run_record
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import RESOLVER
from tests.helpers.loopback import serving_on_loopback
from tests.helpers.mcp_upstream import SERVERS, stdio_spec
from tests.helpers.running_up import running_up
from tests.helpers.sandbox import wait_for_file

pytestmark = pytest.mark.anyio

WINDOW_S = 2.0
"""The reply window the NATS server is configured with."""
LONGER_S = 4
"""How long each slow piece of work takes: twice the window."""
OWNER = 1000
"""An unprivileged uid owns each workspace (a sandbox runs as its workspace's owner)."""


def owned_dir(path: Path) -> Path:
    """A workspace of `OWNER`'s that a sandbox's user may write, whichever user that is."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, OWNER, OWNER)
    path.chmod(0o777)
    return path


@dataclass
class Secured:
    """A NATS server with one user per service and a short reply window."""

    url: str
    users: dict[str, UserCredentials]

    def env(self, user: str) -> dict[str, str]:
        return service_env(self.users, user, self.url)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    port = free_port()
    directory = tmp_path / "nats"
    url = f"nats://127.0.0.1:{port}"
    users = write_nats_config(
        directory,
        listen=f"127.0.0.1:{port}",
        store_dir=str(directory / "jetstream"),
        url=url,
        reply_window_s=WINDOW_S,
    )
    assert 'expires: "2000ms"' in (directory / "auth.conf").read_text()
    with serving(directory / SERVER_FILE, port):
        yield Secured(url, users)


@asynccontextmanager
async def as_service(setup: Any, settings: BusSettings) -> AsyncIterator[Service]:
    async with (
        connect(settings, "test-service") as nc,
        setup(nc, settings) as service,
        service.running(nc, drain_timeout_s=5.0),
    ):
        yield service


@asynccontextmanager
async def secured_plane(
    secured: Secured, tmp_path: Path, *extra: tuple[Any, BusSettings]
) -> AsyncIterator[Client]:
    """Policy, sandbox and orchestrator, each as its own user (and `extra` services); yields
    the operator's connection."""
    state = str(tmp_path / "state")
    services: list[tuple[Any, BusSettings]] = [
        (policy_service, load_settings(PolicySettings, secured.env("policy"))),
        (
            sandbox_service,
            load_settings(SandboxSettings, {**secured.env("sandbox"), "BASTION_STATE_DIR": state}),
        ),
        *extra,
        (orchestrator_service, load_settings(OrchestratorSettings, secured.env("orchestrator"))),
    ]
    async with AsyncExitStack() as stack:
        for setup, settings in services:
            await stack.enter_async_context(as_service(setup, settings))
        operator = load_settings(BusSettings, secured.env("operator"))
        yield await stack.enter_async_context(connect(operator, "operator"))


async def open_l3_session(client: Client, **fields: object) -> SessionInfo:
    ask = msgspec.convert({"agent": "tester", "autonomy": "L3", **fields}, OpenSession)
    info: SessionInfo = await request(client, subjects.SESSION_OPEN, ask, SessionInfo, timeout_s=30)
    return info


async def send(
    client: Client, session_id: str, call: ToolCall, timeout_s: float = 60
) -> CallResult:
    try:
        result: CallResult = await request(
            client, subjects.session_call(session_id), call, CallResult, timeout_s=timeout_s
        )
    except BastionError as error:
        return error.to_reply()
    return result


async def test_a_command_longer_than_the_reply_window_returns_its_result_once(
    secured: Secured, tmp_path: Path
) -> None:
    workspace = owned_dir(tmp_path / "work")
    command = f"echo ran >> log.txt; sleep {LONGER_S}; echo done"
    async with secured_plane(secured, tmp_path) as operator:
        session = await open_l3_session(operator, workspace=str(workspace), shell=True)
        result = await send(
            operator, session.session_id, ToolCall(tool="shell", input={"command": command})
        )
    assert isinstance(result, ToolOutput), result
    assert result.text.startswith("exit status 0\n--- stdout\ndone"), result.text
    assert (workspace / "log.txt").read_text() == "ran\n"


async def _slow_page(stream: SocketStream) -> None:
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive()
        await anyio.sleep(LONGER_S)
        body = b"slow but here\n"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        await stream.send(head.encode() + b"Connection: close\r\n\r\n" + body)


async def test_a_page_slower_than_the_reply_window_is_fetched(
    secured: Secured, tmp_path: Path
) -> None:
    egress = msgspec.structs.replace(
        load_settings(EgressSettings, secured.env("egress")),
        egress_allow_ranges="127.0.0.0/8",
        egress_fetch_timeout_s=30,
    )
    async with (
        serving_on_loopback(_slow_page) as port,
        secured_plane(secured, tmp_path, (egress_service(RESOLVER), egress)) as operator,
    ):
        session = await open_l3_session(operator, web=True, autonomy="L5")
        url = f"http://public.test:{port}/slow"
        result = await send(
            operator, session.session_id, ToolCall(tool="fetch_url", input={"url": url})
        )
    assert isinstance(result, ToolOutput), result
    assert "slow but here" in result.text


async def test_an_upstream_tool_slower_than_the_reply_window_answers(
    secured: Secured, tmp_path: Path
) -> None:
    mcp = load_settings(
        McpSettings,
        {
            **secured.env("mcp"),
            "BASTION_STATE_DIR": str(tmp_path / "mcp-state"),
            "BASTION_HTTP_LISTEN": "127.0.0.1:0",
        },
    )
    directory = tmp_path / "slow"
    directory.mkdir()
    spec = stdio_spec(SERVERS / "slow.py", directory)
    async with secured_plane(secured, tmp_path, (mcp_service, mcp)) as operator:
        added: McpReview = await request(
            operator, subjects.MCP_ADD, AddServer(name="slow", spec=spec), McpReview, timeout_s=60
        )
        assert added.pinned, added
        session = await open_l3_session(operator, mcp=["slow"])
        call = ToolCall(tool="slow_wait", input={"seconds": LONGER_S})
        result = await send(operator, session.session_id, call)
    assert isinstance(result, ToolOutput), result
    assert result.text == f"waited {LONGER_S} s"


# --- the same call id, sent again -----------------------------------------------------------


@pytest.fixture
async def in_process(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> AsyncIterator[None]:
    """Policy, sandbox and orchestrator on the test's NATS (no users)."""
    sandbox = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"))
    async with (
        run_service(policy_service, PolicySettings),
        run_service(sandbox_service, sandbox),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
    ):
        yield


async def test_a_shell_call_sent_again_while_it_runs_and_after_it_ended_runs_once(
    client: Client, in_process: None, tmp_path: Path
) -> None:
    workspace = owned_dir(tmp_path / "work")
    session = await open_l3_session(
        client, workspace=str(workspace), shell=True, limits=SessionLimits(wall_s=30)
    )
    call = ToolCall(
        tool="shell",
        input={"command": "echo line >> log.txt; sleep 2; wc -l < log.txt"},
        call_id="the-one-call",
    )
    answers: list[CallResult] = []

    async def sending() -> None:
        answers.append(await send(client, session.session_id, call))

    async with anyio.create_task_group() as both:
        both.start_soon(sending)
        await anyio.to_thread.run_sync(wait_for_file, workspace / "log.txt", 20.0)
        both.start_soon(sending)  # sent again while the first still runs
    after = await send(client, session.session_id, call)  # and again once it ended
    assert [type(a) for a in answers] == [ToolOutput, ToolOutput], answers
    texts = {a.text for a in [*answers, after] if isinstance(a, ToolOutput)}
    assert texts == {"exit status 0\n--- stdout\n1"}, (answers, after)
    assert (workspace / "log.txt").read_text() == "line\n"


async def test_a_call_sent_again_to_another_replica_while_it_runs_waits_for_its_result(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    """The first orchestrator runs the call and stops taking requests (draining), so the call
    sent again reaches the second, which finds the turn held longer than its turn wait: it
    waits on, as long as the call may take, for the first run's outcome."""
    workspace = owned_dir(tmp_path / "work")
    sandbox = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"))
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url, turn_wait_s=0.5)
    call = ToolCall(
        tool="shell", input={"command": "echo line >> log.txt; sleep 3; echo ok"}, call_id="c-r"
    )
    answers: list[CallResult] = []

    async def sending() -> None:
        answers.append(await send(client, session.session_id, call))

    stop_first, stop_second = anyio.Event(), anyio.Event()

    async def orchestrator(stop: anyio.Event, *, task_status: TaskStatus[None]) -> None:
        async with run_service(orchestrator_service, settings):
            task_status.started()
            await stop.wait()

    async with (
        run_service(policy_service, PolicySettings),
        run_service(sandbox_service, sandbox),
        anyio.create_task_group() as both,
    ):
        await both.start(orchestrator, stop_first)
        session = await open_l3_session(client, workspace=str(workspace), shell=True)
        both.start_soon(sending)  # the first orchestrator, alone, runs it
        await anyio.to_thread.run_sync(wait_for_file, workspace / "log.txt", 20.0)
        await both.start(orchestrator, stop_second)
        stop_first.set()  # it drains: finishes the call, takes no new request
        with anyio.fail_after(20):
            while len(await list_instances(client, window_s=0.2)) != 3:
                pass  # until it has stopped taking requests
        await sending()  # reaches the second orchestrator, while the first still runs it
        stop_second.set()
    assert [type(a) for a in answers] == [ToolOutput, ToolOutput], answers
    assert {a.text for a in answers if isinstance(a, ToolOutput)} == {
        "exit status 0\n--- stdout\nok"
    }
    assert (workspace / "log.txt").read_text() == "line\n"


async def test_a_call_answered_with_an_error_may_be_sent_again_and_then_is_kept(
    client: Client, in_process: None, tmp_path: Path
) -> None:
    """An error answer changed nothing (as with the journal): the same call id is made again;
    once it has a result, that result is what every later sending gets."""
    workspace = owned_dir(tmp_path / "work")
    session = await open_l3_session(client, workspace=str(workspace), shell=True)
    call = ToolCall(tool="read_file", input={"path": "later.txt"}, call_id="c-later")
    first = await send(client, session.session_id, call)
    later = workspace / "later.txt"
    later.write_text("now here\n")
    os.chown(later, OWNER, OWNER)
    second = await send(client, session.session_id, call)
    later.write_text("changed since\n")
    third = await send(client, session.session_id, call)
    assert isinstance(first, ErrorReply) and first.code == "not_found", first
    assert isinstance(second, ToolOutput) and "now here" in second.text, second
    assert isinstance(third, ToolOutput) and third.text == second.text


# --- forty calls while the sandbox service and the orchestrator are killed in turn ---------

ROUNDS = ("sandbox", "orchestrator", "sandbox", "orchestrator", "sandbox")
"""What is killed (-9) while each round of calls is under way."""
PER_ROUND = 8
"""Calls in a round, one per session: 40 in all."""
ANSWERED_BEFORE_KILL = 2


@pytest.fixture
def up_once(tmp_path: Path) -> Iterator[Path]:
    """`bastion up` (one instance each) with short timeouts, so a death costs seconds."""
    short = {"BASTION_REQUEST_TIMEOUT_S": "4", "BASTION_TURN_TTL_S": "3"}
    with running_up(tmp_path / "state", env=short) as state_dir:
        yield state_dir


async def _until_answered(client: Client, session_id: str, call: ToolCall) -> CallResult:
    """Sent until answered: one that got no answer is sent again, with the same call id."""
    result: CallResult | None = None
    with anyio.move_on_after(120):
        while True:
            result = await send(client, session_id, call, timeout_s=20)
            if not (isinstance(result, ErrorReply) and result.code in ("unavailable", "timeout")):
                return result
            await anyio.sleep(0.2)
    raise AssertionError(f"{call} in session {session_id} got no answer but {result}")


async def _back(client: Client, state_dir: Path, name: str, dead: int) -> None:
    """Until `bastion up` has started `name` again and it answers."""
    with anyio.fail_after(60):
        while True:
            record = read_run_record(state_dir)
            again = record is not None and record.children.get(name, dead) != dead
            if again and any(i.name == name for i in await list_instances(client)):
                return
            await anyio.sleep(0.1)


async def _forty_calls(
    state_dir: Path, workspaces: list[Path]
) -> dict[tuple[int, int], CallResult]:
    results: dict[tuple[int, int], CallResult] = {}
    settings = find_bus_settings(None, state_dir, env={})
    async with connect(settings, "kills") as client:
        sids = [
            (
                await open_l3_session(
                    client, workspace=str(w), shell=True, limits=SessionLimits(wall_s=5)
                )
            ).session_id
            for w in workspaces
        ]
        for i, victim in enumerate(ROUNDS):
            some_answered = anyio.Event()

            async def one(n: int, i: int = i, answered: anyio.Event = some_answered) -> None:
                command = f"echo c{n}-{i} >> log.txt; sleep 1; echo ok"
                call = ToolCall(tool="shell", input={"command": command}, call_id=f"c{n}-{i}")
                results[n, i] = await _until_answered(client, sids[n], call)
                if sum(key[1] == i for key in results) == ANSWERED_BEFORE_KILL:
                    answered.set()

            record = read_run_record(state_dir)
            assert record is not None
            pid = record.children[victim]
            async with anyio.create_task_group() as round_:
                for n in range(PER_ROUND):
                    round_.start_soon(one, n)
                await some_answered.wait()  # the others are under way: now the death
                os.kill(pid, signal.SIGKILL)
            await _back(client, state_dir, victim, pid)
    return results


@pytest.mark.e2e
def test_forty_shell_calls_sent_again_through_kills_append_no_line_twice(
    up_once: Path, tmp_path: Path
) -> None:
    workspaces = [owned_dir(tmp_path / f"s{n}") for n in range(PER_ROUND)]
    results = anyio.run(_forty_calls, up_once, workspaces)
    assert len(results) == PER_ROUND * len(ROUNDS)
    ended = {key: r.code for key, r in results.items() if isinstance(r, ErrorReply)}
    assert set(ended.values()) <= {"uncertain"}, ended
    for (n, i), result in results.items():
        log = workspaces[n] / "log.txt"
        lines = log.read_text().splitlines().count(f"c{n}-{i}") if log.exists() else 0
        assert lines <= 1, f"call c{n}-{i} appended its line {lines} times"
        if isinstance(result, ToolOutput):
            assert lines == 1 and result.text.startswith("exit status 0"), (n, i, result)
    assert any(isinstance(r, ToolOutput) for r in results.values())


# --- nobody reads or forges another's answers ------------------------------------------------


async def _violations(secured: Secured, user: str, act: str, subject: str) -> list[str]:
    """What the server says of `user` subscribing to, or publishing on, `subject`."""
    errors: list[str] = []

    async def collect(error: Exception) -> None:
        errors.append(str(error).lower())

    credentials = secured.users[user]
    client = await nats.connect(
        secured.url,
        nkeys_seed=credentials.seed_file,
        inbox_prefix=credentials.inbox_prefix,
        error_cb=collect,
        allow_reconnect=False,
    )
    try:
        if act == "subscribe":
            await client.subscribe(subject)
        else:
            await client.publish(subject, b"forged")
        for _ in range(5):  # the -ERR comes before the PONG of a later round trip
            await client.flush()
            if errors:
                break
    finally:
        await client.close()
    return errors


async def test_no_user_reads_or_forges_answers_on_another_users_reply_subject(
    secured: Secured,
) -> None:
    theirs = subjects.reply_subject("*", "_INBOX.orchestrator.>")
    posing = subjects.reply_subject("policy", "_INBOX.orchestrator.abc")
    own = subjects.reply_subject("sandbox", "_INBOX.orchestrator.abc")
    assert await _violations(secured, "mcp", "subscribe", theirs)
    assert await _violations(secured, "sandbox", "publish", posing)
    assert not await _violations(secured, "orchestrator", "subscribe", theirs)
    assert not await _violations(secured, "sandbox", "publish", own)
