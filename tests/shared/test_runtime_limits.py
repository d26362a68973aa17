"""Bounds of the runtime: work in flight is capped, and a logged exception keeps its text out."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from bastion.shared.bus import Client, request
from bastion.shared.logs import JsonFormatter
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.runtime import SECRET, SUBJECT, Echo, Echoed, Harness


def one_slot_service(harness: Harness) -> Any:
    @asynccontextmanager
    async def setup(_client: Client, _settings: BusSettings) -> AsyncIterator[Service]:
        service = Service("testsvc", "1.2.3", max_in_flight=1)
        service.add_endpoint("echo", SUBJECT, Echo, harness.handle)
        yield service

    return setup


async def test_past_its_limit_of_work_in_flight_a_service_waits_for_a_free_slot(
    client: Client, run_service: ServiceRunner, harness: Harness
) -> None:
    second_answered = anyio.Event()
    answers: list[str] = []

    async def ask(text: str) -> None:
        answer: Echoed = await request(client, SUBJECT, Echo(text=text), Echoed, timeout_s=10)
        answers.append(answer.text)
        if text == "second":
            second_answered.set()

    with anyio.fail_after(15):
        async with run_service(one_slot_service(harness)), anyio.create_task_group() as tg:
            tg.start_soon(ask, "block")
            await harness.started.wait()
            tg.start_soon(ask, "second")
            with anyio.move_on_after(0.5):
                await second_answered.wait()
            held_back = not second_answered.is_set()
            harness.release.set()
            await second_answered.wait()
    assert held_back, "the second request was answered while the only slot was taken"
    assert answers == ["released", "second"]


def test_a_logged_exception_names_its_type_and_place_but_never_its_text() -> None:
    formatter = JsonFormatter("testsvc")
    try:
        raise ValueError(f"token={SECRET}")
    except ValueError:
        record = logging.LogRecord(
            "t", logging.ERROR, __file__, 1, "handler failed", (), sys.exc_info()
        )
    line = json.loads(formatter.format(record))
    assert line["error_type"] == "ValueError"
    assert "test_runtime_limits.py" in line["traceback"]
    assert SECRET not in json.dumps(line)
