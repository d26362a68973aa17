"""Answers on the bus: a client's many requests at once each get their own answer through
the client's two reply subscriptions, and an `inline` endpoint answers and counts every
request it is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from bastion.shared.bus import Client, request
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.runtime import SUBJECT, Echo, Echoed


def echo_setup(*, inline: bool) -> object:
    """A service answering `Echo(text)` with `Echoed(text)`, its endpoint `inline` or not."""

    @asynccontextmanager
    async def setup(_client: Client, _settings: BusSettings) -> AsyncIterator[Service]:
        async def echo(message: Echo, _: RequestContext) -> Echoed:
            return Echoed(text=message.text)

        service = Service("testsvc", "0.0.1")
        service.add_endpoint("echo", SUBJECT, Echo, echo, inline=inline)
        yield service

    return setup


async def test_requests_of_one_client_at_once_each_get_their_own_answer(
    client: Client, run_service: ServiceRunner
) -> None:
    answered: dict[int, str] = {}

    async def ask(n: int) -> None:
        reply: Echoed = await request(client, SUBJECT, Echo(text=f"n{n}"), Echoed, timeout_s=10)
        answered[n] = reply.text

    async with run_service(echo_setup(inline=False)):
        with anyio.fail_after(30):
            async with anyio.create_task_group() as asking:
                for n in range(100):
                    asking.start_soon(ask, n)
    assert answered == {n: f"n{n}" for n in range(100)}


async def test_an_inline_endpoint_answers_and_counts_every_request(
    client: Client, run_service: ServiceRunner
) -> None:
    answered: list[str] = []

    async def ask(n: int) -> None:
        reply: Echoed = await request(client, SUBJECT, Echo(text=f"n{n}"), Echoed, timeout_s=10)
        answered.append(reply.text)

    async with run_service(echo_setup(inline=True)) as service:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as asking:
                for n in range(20):
                    asking.start_soon(ask, n)
        assert service.endpoints["echo"].requests == 20
        assert service.endpoints["echo"].in_flight == 0
    assert sorted(answered) == sorted(f"n{n}" for n in range(20))
