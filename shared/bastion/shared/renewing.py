"""A lease kept alive while a block runs: its renewal in a task beside the block, and the
block's own error raised as it is (not inside the task group's exception group), so
callers catch what they would if nothing were renewed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio

__all__ = ["renewing"]


@asynccontextmanager
async def renewing(renew: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run `renew` (a loop that renews until cancelled) while the block runs."""
    raised: BaseException | None = None
    async with anyio.create_task_group() as renewals:
        renewals.start_soon(renew)
        try:
            yield
        except BaseException as error:  # raised again below
            raised = error
        finally:
            renewals.cancel_scope.cancel()
    if raised is not None:
        raise raised
