"""Large cuts are made in worker threads, a tenant's one at a time, beside other tenants'
(`bastion.shared.cutturns`). Each step waits for an event the work sets, never for a time."""

from __future__ import annotations

import threading

import anyio
import anyio.to_thread
import pytest

from bastion.shared.cutturns import INLINE_CHARS, Cutter, CutTurns
from bastion.shared.redaction import Redactor

pytestmark = pytest.mark.anyio

LARGE = INLINE_CHARS


async def _until(event: threading.Event) -> None:
    await anyio.to_thread.run_sync(event.wait)


async def test_a_tenants_cuts_wait_for_its_own_and_never_for_another_tenants() -> None:
    turns = CutTurns()
    started = threading.Event()
    release = threading.Event()
    done: list[str] = []

    def held() -> None:
        started.set()
        release.wait()
        done.append("first of a")

    async with anyio.create_task_group() as group:
        group.start_soon(turns.run, "a", LARGE, held)
        await _until(started)
        group.start_soon(turns.run, "a", LARGE, lambda: done.append("second of a"))
        assert await turns.run("b", LARGE, lambda: "b's cut") == "b's cut"
        assert done == []  # b was cut while a's first still held its turn, its second waiting
        release.set()
    assert done == ["first of a", "second of a"]


async def test_a_cut_cancelled_while_waiting_for_its_turn_is_never_made() -> None:
    turns = CutTurns()
    started = threading.Event()
    release = threading.Event()
    made: list[str] = []

    def held() -> None:
        started.set()
        release.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(turns.run, "a", LARGE, held)
        await _until(started)
        with anyio.CancelScope() as waiting:
            waiting.cancel()
            await turns.run("a", LARGE, lambda: made.append("cut"))
        assert waiting.cancelled_caught
        release.set()
    assert made == []


async def test_a_small_text_is_cut_on_the_event_loop_and_a_large_one_in_a_worker() -> None:
    loop_thread = threading.get_ident()
    cutter = Cutter(Redactor([("TOKEN", "s3cr3t-value")]), "a", CutTurns())
    assert await cutter.run(LARGE - 1, threading.get_ident) == loop_thread
    assert await cutter.run(LARGE, threading.get_ident) != loop_thread
    text = "x" * LARGE + " s3cr3t-value"
    assert await cutter.cut(text) == "x" * LARGE + " [secret TOKEN]"
    assert await Cutter(None, "a", CutTurns()).cut(text) == text
