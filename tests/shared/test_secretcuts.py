"""A session's redactor (`SecretCuts`): built off the event loop, and the kept ones bounded.

From an attack review: a tenant whose values are many and long (fifty of 4 KiB) had its
cutter built on the service's event loop, for seconds, stalling every other tenant's calls;
and every set it had ever had stayed kept, hundreds of MB each. Nothing here is timed:
what another task got done meanwhile, and the sizes kept, are the evidence.
"""

from __future__ import annotations

import secrets

import anyio
import anyio.lowlevel
import pytest

from bastion.shared import secretcuts
from bastion.shared.secretcuts import SecretCuts


def _values(count: int, size: int) -> list[tuple[str, str]]:
    return [(f"V{i}", secrets.token_urlsafe(size)[:size]) for i in range(count)]


async def test_a_large_cutter_is_built_while_the_event_loop_goes_on() -> None:
    cuts = SecretCuts()
    cuts.remember("big", "s1", _values(50, 4096))
    turns = 0
    built = anyio.Event()

    async def tick() -> None:
        nonlocal turns
        while not built.is_set() and turns < 200:
            turns += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        redactor = await cuts.redactor("big", "s1")
        built.set()
    assert redactor is not None and redactor.size > 1_000_000
    # built on the loop, it would turn no time at all: the ticker would start after it
    assert turns >= 10, f"the loop turned {turns} times while the cutter was built"


async def test_the_kept_cutters_are_bounded_by_what_they_are_built_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuts = SecretCuts()
    for session in range(6):
        cuts.remember("t", f"s{session}", _values(10, 2048))
        await cuts.redactor("t", f"s{session}")
    whole = cuts.kept_size
    assert whole > 6 * 10 * 2048  # each set is kept (its forms are several times its values)
    bound = whole // 3
    monkeypatch.setattr(secretcuts, "MAX_REDACTOR_CHARS", bound)
    cuts.remember("t", "s6", _values(10, 2048))
    await cuts.redactor("t", "s6")
    assert cuts.kept_size <= bound
