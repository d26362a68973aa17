"""Listing a KV bucket's keys: every live key, deleted and purged ones left out, never a
partial answer because of timing."""

from __future__ import annotations

import anyio

from bastion.shared.bus import Client
from bastion.shared.kv import bucket_keys, open_bucket


async def test_bucket_keys_lists_every_live_key_and_leaves_out_deleted_and_purged(
    client: Client,
) -> None:
    kv = await open_bucket(client, "test_listing")
    assert await bucket_keys(client, kv) == []
    for n in range(50):
        await kv.put(f"k{n}", b"x")
    await kv.put("k0", b"again")  # a newer revision of a key is still one key
    await kv.delete("k1")
    await kv.purge("k2")
    keys = await bucket_keys(client, kv)
    assert sorted(keys) == sorted(f"k{n}" for n in range(50) if n not in (1, 2))


async def test_bucket_keys_answers_the_same_when_asked_many_times_at_once(
    client: Client,
) -> None:
    kv = await open_bucket(client, "test_listing_busy")
    for n in range(20):
        await kv.put(f"k{n}", b"x")
    answers: list[int] = []

    async def ask() -> None:
        answers.append(len(await bucket_keys(client, kv)))

    async with anyio.create_task_group() as tg:
        for _ in range(30):
            tg.start_soon(ask)
    assert answers == [20] * 30
