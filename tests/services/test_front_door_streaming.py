"""A `shell` call's output as it is written, told to an MCP client that asked for progress:
the SDK's own client against the front door and real services (bubblewrap) on a real NATS.

The sandbox's interval is shrunk (`BASTION_STREAM_INTERVAL_S`) and so is the front door's
heartbeat (`BASTION_MCP_PROGRESS_EVERY_S`); nothing here asserts how long anything took:
a command that must see its own output streamed waits for a file the test writes once a
notification carried that output.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from nats.aio.msg import Msg

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.sandbox import OutputChunk
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import round_trip
from bastion.shared.codec import decode
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.front_door import Asked, DoorOf, mcp_client, new_token, text_of
from tests.helpers.vault import add, key_file, vault_settings

pytestmark = pytest.mark.anyio

OWNER = 1000
HEARTBEAT = "shell runs ("
CHUNK_BYTES = 1024
TOTAL_BYTES = 16 * 1024
NAME = "LEAK_TOKEN"


@dataclass
class Told:
    """What a call's progress notifications said, in order; `output` leaves heartbeats out."""

    messages: list[str] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    when: dict[str, anyio.Event] = field(default_factory=dict)

    async def __call__(self, done: float, _total: float | None, message: str | None) -> None:
        self.messages.append(message or "")
        self.progress.append(done)
        for wanted, event in self.when.items():
            if wanted in "".join(self.output):
                event.set()

    @property
    def output(self) -> list[str]:
        return [m for m in self.messages if not m.startswith(HEARTBEAT)]

    @property
    def beats(self) -> list[str]:
        return [m for m in self.messages if m.startswith(HEARTBEAT)]


@dataclass
class Wire:
    """Every chunk published on any call's output subject, as the bus carried it."""

    chunks: list[bytes] = field(default_factory=list)

    async def keep(self, msg: Msg) -> None:
        self.chunks.append(msg.data)


@asynccontextmanager
async def streaming_plane(
    run_service: ServiceRunner, bus_settings: BusSettings, state_dir: Path, **sandbox: Any
) -> AsyncIterator[None]:
    """Sandbox (streaming every 0.05 s, in chunks of at most `CHUNK_BYTES` and
    `TOTAL_BYTES` in all), orchestrator and policy on the test's NATS."""
    url = bus_settings.nats_url
    settings = SandboxSettings(
        nats_url=url,
        state_dir=str(state_dir),
        stream_interval_s=0.05,
        stream_chunk_bytes=CHUNK_BYTES,
        stream_total_bytes=TOTAL_BYTES,
        **sandbox,
    )
    async with (
        run_service(sandbox_service, settings),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
        run_service(policy_service, PolicySettings),
    ):
        yield


@asynccontextmanager
async def wire(client: Bus) -> AsyncIterator[Wire]:
    seen = Wire()
    subscription = await client.subscribe(f"{subjects.PREFIX}.calls.output.>", cb=seen.keep)
    await round_trip(client)
    try:
        yield seen
    finally:
        await subscription.unsubscribe()


def put(workspace: Path, name: str, text: str) -> None:
    path = workspace / name
    path.write_text(text)
    os.chown(path, OWNER, OWNER)


async def test_a_commands_lines_are_told_in_order_while_it_runs_and_before_its_result(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
) -> None:
    told = Told()
    told.when["line-3\n"] = anyio.Event()
    # The command goes on only once the test saw line-3 in a notification (or gives up
    # after 20 s and says so): its output must have been told while it ran.
    command = (
        "for i in 1 2 3; do echo line-$i; sleep 0.3; done; "
        "n=0; while [ ! -e seen ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; "
        "[ -e seen ] && echo line-4 || echo never-seen; echo line-5 >&2"
    )
    events: list[str] = []

    async def see() -> None:
        await told.when["line-3\n"].wait()
        put(workspace, "seen", "")
        events.append("seen")

    async with (
        streaming_plane(run_service, bus_settings, sandbox_state_dir),
        door_of(mcp_progress_every_s=0.2) as url,
    ):
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token) as mcp, anyio.create_task_group() as group:
            group.start_soon(see)
            with anyio.fail_after(60):
                ran = await mcp.call_tool("shell", {"command": command}, progress_callback=told)
            events.append(f"result after {len(told.output)} notifications of output")
    assert not ran.is_error, text_of(ran)
    assert "line-4" in text_of(ran) and "never-seen" not in text_of(ran)
    assert "".join(told.output) == "line-1\nline-2\nline-3\nline-4\nline-5\n"
    assert len(told.output) >= 2  # line-4 came after line-3 was told: another notification
    assert events[0] == "seen" and events[-1].startswith("result")
    assert told.progress == sorted(told.progress) and len(set(told.progress)) == len(told.progress)


async def test_a_secret_the_command_prints_is_cut_from_every_notification_split_or_not(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
    tmp_path: Path,
) -> None:
    value = "Tok-" + os.urandom(12).hex()
    put(workspace, "notes.txt", value)
    told = Told()
    # Its first characters, a pause long enough for several chunks, then the rest; and
    # then whole, to stdout and to stderr.
    command = (
        "head -c 9 notes.txt; sleep 0.5; tail -c +10 notes.txt; echo; sleep 0.3; "
        "cat notes.txt; echo; cat notes.txt >&2; echo done"
    )
    async with (
        run_service(vault_service, vault_settings(bus_settings.nats_url, key_file(tmp_path))),
        streaming_plane(run_service, bus_settings, sandbox_state_dir),
        door_of() as url,
        wire(client) as seen,
    ):
        await add(client, NAME, value.encode())
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token) as mcp:
            with anyio.fail_after(60):
                ran = await mcp.call_tool("shell", {"command": command}, progress_callback=told)
        await client.flush()
    assert not ran.is_error, text_of(ran)
    assert f"[secret {NAME}]\n[secret {NAME}]\ndone" in text_of(ran)
    streamed = "".join(told.output)
    assert streamed.count(f"[secret {NAME}]") == 3, told.output
    assert "done\n" in streamed
    pieces = [value[i : i + 6] for i in range(len(value) - 5)]
    for message in told.messages:
        assert not any(piece in message for piece in pieces), message
    assert seen.chunks
    for data in seen.chunks:
        chunk = decode(data, OutputChunk)
        shown = chunk.stdout + chunk.stderr
        assert not any(piece in shown for piece in pieces), shown
        assert value.encode() not in data


async def test_a_flood_of_output_is_told_in_bounded_notifications_and_then_no_more(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
) -> None:
    told = Told()
    async with (
        streaming_plane(run_service, bus_settings, sandbox_state_dir),
        door_of() as url,
        wire(client) as seen,
    ):
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token) as mcp:
            with anyio.fail_after(120):
                ran = await mcp.call_tool(
                    "shell",
                    {"command": "yes | head -c 50000000; echo finished"},
                    progress_callback=told,
                )
        await client.flush()
    assert not ran.is_error, text_of(ran)
    assert "stdout was cut" in text_of(ran) and "finished" in text_of(ran)
    chunks = [decode(data, OutputChunk) for data in seen.chunks]
    assert chunks and len(chunks) == len(told.output)
    assert sum(len(c.stdout) + len(c.stderr) for c in chunks) <= TOTAL_BYTES
    assert all(len(c.stdout.encode()) + len(c.stderr.encode()) <= CHUNK_BYTES for c in chunks)
    assert any(c.more > 0 for c in chunks)
    assert not any(c.capped for c in chunks[:-1])  # once capped, nothing more is sent
    assert all(len(message.encode()) <= CHUNK_BYTES + 120 for message in told.output)
    assert any("bytes more" in message for message in told.output)
    capped = "the output streams no further: the call's result has it"
    assert told.output[-1].endswith(capped) == chunks[-1].capped


async def test_a_command_that_prints_nothing_gets_heartbeats_and_no_output(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
) -> None:
    told = Told()
    async with (
        streaming_plane(run_service, bus_settings, sandbox_state_dir),
        door_of(mcp_progress_every_s=0.2) as url,
        wire(client) as seen,
    ):
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token) as mcp:
            ran = await mcp.call_tool("shell", {"command": "sleep 1.5"}, progress_callback=told)
        await client.flush()
    assert not ran.is_error, text_of(ran)
    assert told.beats and told.beats[0] == "shell runs (0.2 s)"
    assert told.output == [] and seen.chunks == []


async def test_a_call_whose_client_asked_no_progress_publishes_no_output(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
) -> None:
    async with (
        streaming_plane(run_service, bus_settings, sandbox_state_dir),
        door_of() as url,
        wire(client) as seen,
    ):
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token) as mcp:
            ran = await mcp.call_tool(
                "shell", {"command": "for i in 1 2 3; do echo plain-$i; sleep 0.2; done"}
            )
        await client.flush()
    assert not ran.is_error and "plain-3" in text_of(ran)
    assert seen.chunks == []


async def test_two_agents_streaming_at_once_are_each_told_only_their_own_output(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
    tmp_path: Path,
) -> None:
    other_workspace = tmp_path / "other"
    other_workspace.mkdir()
    os.chown(other_workspace, OWNER, OWNER)
    told = {"first": Told(), "second": Told()}
    ran: dict[str, str] = {}

    async def run(url: str, token: str, who: str) -> None:
        async with mcp_client(url, token) as mcp:
            command = f"for i in 1 2 3 4; do echo {who}-$i; sleep 0.2; done"
            result = await mcp.call_tool("shell", {"command": command}, progress_callback=told[who])
            ran[who] = text_of(result)

    async with (
        streaming_plane(run_service, bus_settings, sandbox_state_dir),
        door_of() as url,
    ):
        first = await new_token(client, workspace, autonomy="L3", shell=True)
        second = await new_token(client, other_workspace, autonomy="L3", shell=True)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(partial(run, url, first, "first"))
                group.start_soon(partial(run, url, second, "second"))
    for who, other in (("first", "second"), ("second", "first")):
        streamed = "".join(told[who].output)
        assert streamed == "".join(f"{who}-{i}\n" for i in range(1, 5)), streamed
        assert other not in streamed and f"{who}-4" in ran[who]


async def test_a_streamed_call_bastion_does_not_answer_is_the_json_rpc_error_saying_so(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
) -> None:
    told = Told()
    async with door_of(mcp_progress_every_s=0.2) as url:
        async with streaming_plane(run_service, bus_settings, sandbox_state_dir):
            token = await new_token(client, workspace, autonomy="L3", shell=True)
            async with mcp_client(url, token, "auto") as mcp:
                await mcp.list_tools()  # the token's session is opened while Bastion runs
        async with mcp_client(url, token, "auto") as mcp:
            with anyio.fail_after(60), pytest.raises(MCPError) as refused:
                await mcp.call_tool("shell", {"command": "echo hi"}, progress_callback=told)
    # the front door's typed error (`unavailable`), not a task group's
    assert "Bastion does not answer" in str(refused.value), refused.value
    assert "is it running?" in str(refused.value)
    assert told.output == []


async def test_a_call_a_person_approves_through_elicitation_streams_once_it_runs(
    client: Bus,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    door_of: DoorOf,
    workspace: Path,
) -> None:
    approve = Asked({"decision": "approve"})
    told = Told()
    async with (
        streaming_plane(run_service, bus_settings, sandbox_state_dir),
        door_of() as url,
    ):
        token = await new_token(client, workspace, autonomy="L2", shell=True)
        async with mcp_client(url, token, elicit=approve) as mcp:
            with anyio.fail_after(60):
                ran = await mcp.call_tool(
                    "shell",
                    {"command": "for i in 1 2; do echo approved-$i; sleep 0.2; done"},
                    progress_callback=told,
                )
    assert not ran.is_error, text_of(ran)
    [asked] = approve.messages
    assert "shell" in asked
    assert "".join(told.output) == "approved-1\napproved-2\n"
