"""A lease kept alive while a block runs: its renewal in a task beside the block, and the
block's own error raised as it is (not inside the task group's exception group), so
callers catch what they would if nothing were renewed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio

__all__ = ["renewing"]


@asynccontextmanager
async def renewing(
    renew: Callable[[], Coroutine[Any, Any, None]], *, after_s: float = 0.0
) -> AsyncIterator[None]:
    """Run `renew` (a loop that renews until cancelled) while the block runs, from `after_s`
    after the block began: a block that ends sooner (a call, against a lease of seconds)
    starts no task at all, only a timer."""
    raised: BaseException | None = None
    started = after_s <= 0

    def start() -> None:
        nonlocal started
        started = True
        renewals.start_soon(renew)

    async with anyio.create_task_group() as renewals:
        if started:
            renewals.start_soon(renew)
        else:
            timer = asyncio.get_running_loop().call_later(after_s, start)
        try:
            yield
        except BaseException as error:  # raised again below
            raised = error
        finally:
            if not started:
                timer.cancel()
            else:  # nothing to cancel (and no task's repr to format) when none started
                renewals.cancel_scope.cancel()
    if raised is not None:
        raise raised
