"""A lease renewed while a block runs: from the delay asked on, every time, and not at all
for a block that ends sooner; the block's own error raised as it is."""

from __future__ import annotations

import anyio
import pytest

from bastion.shared.renewing import renewing


async def test_a_block_shorter_than_the_delay_renews_nothing_and_a_longer_one_renews() -> None:
    renewed: list[float] = []

    async def renew() -> None:
        while True:
            renewed.append(anyio.current_time())
            await anyio.sleep(0.05)

    with anyio.fail_after(10):
        async with renewing(renew, after_s=0.2):
            await anyio.sleep(0.01)
        await anyio.sleep(0.3)  # the timer was cancelled with the block
        assert renewed == []
        began = anyio.current_time()
        async with renewing(renew, after_s=0.1):
            await anyio.sleep(0.4)
        count = len(renewed)
        await anyio.sleep(0.2)  # and the renewal stopped with it
    assert count >= 2 and len(renewed) == count
    assert renewed[0] - began >= 0.1


async def test_the_blocks_error_is_raised_as_it_is() -> None:
    async def renew() -> None:
        await anyio.sleep_forever()

    for after_s in (0.0, 5.0):
        with anyio.fail_after(5), pytest.raises(KeyError):
            async with renewing(renew, after_s=after_s):
                raise KeyError("mine")
