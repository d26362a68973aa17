"""Run one task beside a block of code, for as long as the block runs."""

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio

__all__ = ["in_background"]


@asynccontextmanager
async def in_background(task: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run `task` while the block runs; it is cancelled when the block ends, however it ends."""
    async with anyio.create_task_group() as group:
        group.start_soon(task)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
