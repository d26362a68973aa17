"""The runtime tests' own service (an echo endpoint a test steers), and probes of a service
running as a process."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
import nats.errors
from anyio.abc import Process

from bastion.proto._base import Ingress, Message
from bastion.shared.bus import Client
from bastion.shared.errors import InvalidInput
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings

__all__ = [
    "SECRET",
    "STRICT_SUBJECT",
    "SUBJECT",
    "Echo",
    "Echoed",
    "Harness",
    "StrictEcho",
    "raw",
    "read_all",
    "service_env",
    "wait_until_pinged",
]

SUBJECT = "bastion.v1.test.echo"
STRICT_SUBJECT = "bastion.v1.test.strict"
SECRET = "hunter2"


class Echo(Message, frozen=True, kw_only=True, tag="test.echo"):
    """What the test endpoint takes: `text` chooses what the handler does."""

    text: str


class StrictEcho(Ingress, frozen=True, kw_only=True, tag="test.strict"):
    """The same, as a message an agent fills: unknown fields are refused."""

    text: str


class Echoed(Message, frozen=True, kw_only=True, tag="test.echoed"):
    text: str


@dataclass
class Harness:
    """The test endpoint's handler and the events a test steers it with."""

    started: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    seen: list[RequestContext] = field(default_factory=list)
    huge_bytes: int = 16 * 1024 * 1024

    async def handle(self, request: Echo | StrictEcho, context: RequestContext) -> object:
        self.seen.append(context)
        if request.text == "block":
            self.started.set()
            await self.release.wait()
            return Echoed(text="released")
        if request.text == "raise":
            raise ValueError(f"token={SECRET}")
        if request.text == "invalid":
            raise InvalidInput("the text is not acceptable: say something else")
        if request.text == "unencodable":
            return object()
        if request.text == "huge":
            return Echoed(text="x" * self.huge_bytes)
        return Echoed(text=request.text)

    def service(self) -> Service:
        service = Service("testsvc", "1.2.3", "A service that exists for the runtime tests.")
        service.add_endpoint("echo", SUBJECT, Echo, self.handle)
        service.add_endpoint("strict", STRICT_SUBJECT, StrictEcho, self.handle)
        return service

    def setup(self) -> Any:
        @asynccontextmanager
        async def setup(_client: Client, _settings: BusSettings) -> AsyncIterator[Service]:
            yield self.service()

        return setup


def raw(message: object) -> bytes:
    return msgspec.msgpack.encode(message)


def service_env(nats_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BASTION_", "OTEL_"))}
    return {**env, "BASTION_NATS_URL": nats_url, **extra}


async def read_all(process: Process) -> bytes:
    assert process.stderr is not None
    chunks = [chunk async for chunk in process.stderr]
    return b"".join(chunks)


async def wait_until_pinged(client: Client, name: str, process: Process) -> dict[str, object]:
    """Poll `$SRV.PING.<name>` until the process answers (bounded by the caller's deadline)."""
    while True:
        assert process.returncode is None, "the service exited before it was ready"
        try:
            reply = await client.request(f"$SRV.PING.{name}", b"", timeout=1)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            await anyio.sleep(0.05)  # poll interval, not a wait for an outcome
            continue
        answer: dict[str, object] = json.loads(reply.data)
        return answer
