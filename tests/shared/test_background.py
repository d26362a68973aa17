"""A task beside a block: it runs while the block runs and is cancelled when it ends."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from bastion.shared.background import in_background


async def test_the_task_runs_during_the_block_and_is_cancelled_after() -> None:
    started, cancelled = anyio.Event(), anyio.Event()

    async def task() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async with in_background(task):
        await started.wait()
        assert not cancelled.is_set()
    assert cancelled.is_set()


async def test_an_error_in_the_block_still_cancels_the_task() -> None:
    cancelled = anyio.Event()

    async def task() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    with pytest.raises(ExceptionGroup) as raised:
        async with in_background(task):
            await anyio.lowlevel.checkpoint()
            raise ValueError("the block failed")
    assert raised.group_contains(ValueError)
    assert cancelled.is_set()
