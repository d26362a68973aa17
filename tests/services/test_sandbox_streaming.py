"""The sandbox's stream of a call's output (`bastion.sandbox.streaming`) on a real NATS:
bounded chunks, capped in all, secrets cut across chunks, nothing for a call that did not
ask. Output is fed to its tap as a backend feeds it; each step waits for the chunk it
makes, never for a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from nats.aio.msg import Msg

from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, ExecResult, OutputChunk
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.streaming import OutputStreams, StreamBounds
from bastion.shared.bus import Client, request, round_trip
from bastion.shared.codec import decode
from bastion.shared.cutturns import Cutter, CutTurns
from bastion.shared.errors import RemoteError
from bastion.shared.redaction import Redactor
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

pytestmark = pytest.mark.anyio

SESSION = "0123456789abcdef"
BOUNDS = StreamBounds(interval_s=0.01, chunk_bytes=1024, total_bytes=4096)
VALUE = "Tok-9f8e7d6c5b4a39281706"


def _cutter(redactor: Redactor | None = None) -> Cutter:
    return Cutter(redactor, "default", CutTurns())


def _request(call_id: str = "call-1", stream: bool = True) -> ExecRequest:
    return ExecRequest(
        session_id=SESSION, workspace="/w", command="true", call_id=call_id, stream=stream
    )


@dataclass
class Received:
    chunks: list[OutputChunk] = field(default_factory=list)
    arrived: anyio.Event = field(default_factory=anyio.Event)

    async def keep(self, msg: Msg) -> None:
        self.chunks.append(decode(msg.data, OutputChunk))
        self.arrived.set()

    async def next(self) -> OutputChunk:
        with anyio.fail_after(10):
            await self.arrived.wait()
        self.arrived = anyio.Event()
        return self.chunks[-1]

    @property
    def text(self) -> str:
        return "".join(c.stdout + c.stderr for c in self.chunks)


@asynccontextmanager
async def receiving(client: Client, call_id: str = "call-1") -> AsyncIterator[Received]:
    received = Received()
    subscription = await client.subscribe(subjects.call_output(SESSION, call_id), cb=received.keep)
    await round_trip(client)
    try:
        yield received
    finally:
        await client.flush()
        await subscription.unsubscribe()


async def test_a_flood_is_sent_in_bounded_chunks_then_capped_and_nothing_after(
    client: Client,
) -> None:
    burst = b"y\n" * 32 * 1024
    async with receiving(client) as received:
        async with OutputStreams(client, BOUNDS).opened(_request(), _cutter()) as tap:
            assert tap is not None
            for _ in range(20):
                for _ in range(16):
                    # the Docker backend taps from its reading thread
                    await anyio.to_thread.run_sync(tap, "stdout", burst)
                chunk = await received.next()
                if chunk.capped:
                    break
            sent = len(received.chunks)
            tap("stdout", b"after the cap\n")
            tap("stderr", burst)
        await client.flush()
    chunks = received.chunks
    assert len(chunks) == sent and [c.seq for c in chunks] == list(range(1, sent + 1))
    assert all(len((c.stdout + c.stderr).encode()) <= BOUNDS.chunk_bytes for c in chunks)
    assert all(c.more > 0 for c in chunks)
    assert [c.capped for c in chunks] == [False] * (sent - 1) + [True]
    assert len(received.text.encode()) == BOUNDS.total_bytes
    assert set(received.text) == {"y", "\n"}


async def test_a_secret_split_across_chunks_is_cut_and_no_part_of_it_is_sent(
    client: Client,
) -> None:
    redactor = Redactor([("TOKEN", VALUE)])
    filler = "." * 900 + "\n"
    async with receiving(client) as received:
        async with OutputStreams(client, BOUNDS).opened(_request(), _cutter(redactor)) as tap:
            assert tap is not None
            tap("stdout", f"{filler}token={VALUE[:7]}".encode())
            first = await received.next()
            tap("stdout", f"{VALUE[7:]}\n".encode() + "é".encode()[:1])
            tap("stdout", "é".encode()[1:] + b"\n")
            tap("stderr", VALUE[:3].encode())
            tap("stderr", VALUE[3:].encode())
        await client.flush()
    assert VALUE[:7] not in first.stdout and first.stdout.startswith(".")
    pieces = [VALUE[i : i + 5] for i in range(len(VALUE) - 4)]
    for chunk in received.chunks:
        assert not any(piece in chunk.stdout + chunk.stderr for piece in pieces), chunk
    stdout = "".join(c.stdout for c in received.chunks)
    stderr = "".join(c.stderr for c in received.chunks)
    assert stdout == f"{filler}token=[secret TOKEN]\né\n"
    assert stderr == "[secret TOKEN]"
    assert all(c.more == 0 for c in received.chunks)


@pytest.mark.parametrize(
    ("call_id", "stream"), [("call-1", False), ("", True), ("a.b", True), ("a*", True)]
)
async def test_a_call_that_asked_for_no_stream_or_names_no_subject_token_gets_no_tap(
    client: Client, call_id: str, stream: bool
) -> None:
    async with OutputStreams(client, BOUNDS).opened(_request(call_id, stream), _cutter()) as tap:
        assert tap is None


async def test_a_streamed_command_whose_sandbox_fails_is_answered_with_the_typed_error(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"), bwrap="no-such-bwrap"
    )
    asked = ExecRequest(
        session_id=SESSION, workspace=str(workspace), command="echo hi", call_id="c1", stream=True
    )
    async with run_service(sandbox_service, settings), receiving(client, "c1") as received:
        with pytest.raises(RemoteError) as failed:
            await request(client, subjects.SANDBOX_EXEC, asked, ExecResult, timeout_s=30)
    assert failed.value.code == "sandbox_failed" and "no-such-bwrap" in failed.value.message
    assert received.chunks == []
