"""KV buckets: listing every live key (deleted and purged ones left out, never a partial
answer because of timing), and the typed bucket every store keeps its state in: create,
get, compare-and-set updates settled by retry or given up with a typed error, prefixes
and watches."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import msgspec
import nats.js.errors
import pytest

from bastion.proto import errors as codes
from bastion.shared.bus import Client
from bastion.shared.errors import NotFound
from bastion.shared.kv import (
    AlreadyStored,
    ChangedSince,
    Entry,
    KeptChanging,
    NotStored,
    TypedBucket,
    Watched,
    bucket_keys,
    open_bucket,
)


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


class Count(msgspec.Struct, frozen=True):
    n: int = 0


def _more(count: Count | None) -> Count:
    return Count((count or Count()).n + 1)


async def test_a_create_refuses_a_key_already_kept_and_leaves_it_as_it_was(client: Client) -> None:
    bucket = await TypedBucket.open(client, "test_typed_create", Count)
    revision = await bucket.create("k", Count(1))
    with pytest.raises(AlreadyStored) as refused:
        await bucket.create("k", Count(2))
    assert refused.value.code == codes.CONFLICT
    assert "k is kept in test_typed_create already" in refused.value.message
    assert await bucket.get("k") == Entry("k", Count(1), revision)


async def test_a_deleted_or_purged_key_reads_as_absent_and_is_created_again(
    client: Client,
) -> None:
    bucket = await TypedBucket.open(client, "test_typed_recreate", Count)
    for forget in (bucket.delete, bucket.purge):
        first = await bucket.create("k", Count(1))
        await forget("k")
        assert await bucket.find("k") is None
        again = await bucket.create("k", Count(2))  # over the marker the removal left
        assert again > first
        assert await bucket.get("k") == Entry("k", Count(2), again)
        with pytest.raises(AlreadyStored):
            await bucket.create("k", Count(3))
        await bucket.delete("k")


async def test_a_key_nats_would_not_take_is_refused_before_anything_is_sent(
    client: Client,
) -> None:
    bucket = await TypedBucket.open(client, "test_typed_bad_key", Count)
    for key in ("", ".k", "k.", "a b", "k>", "k*"):
        with pytest.raises(nats.js.errors.InvalidKeyError):
            await bucket.find(key)
        with pytest.raises(nats.js.errors.InvalidKeyError):
            await bucket.put(key, Count(1))


async def test_a_missing_key_is_a_typed_not_found_saying_what_to_do(client: Client) -> None:
    bucket = await TypedBucket.open(client, "test_typed_missing", Count)
    assert await bucket.find("nothing") is None
    with pytest.raises(NotStored) as missing:
        await bucket.get("nothing")
    assert isinstance(missing.value, NotFound)
    assert missing.value.code == codes.NOT_FOUND
    assert missing.value.message == (
        "nothing is kept under nothing in test_typed_missing: it was never stored, or was "
        "removed or expired; check the key, or store it first"
    )
    await bucket.put("gone", Count(1))
    await bucket.delete("gone")
    with pytest.raises(NotStored, match="there is no gone: add it"):
        await bucket.get("gone", missing="there is no gone: add it")


async def test_two_writers_racing_for_one_key_both_land_by_retrying(client: Client) -> None:
    first = await TypedBucket.open(client, "test_typed_race", Count)
    second = await TypedBucket.open(client, "test_typed_race", Count)
    await first.put("k", Count(0))
    read: list[int] = []
    both_read = anyio.Event()

    async def slow_more(count: Count | None) -> Count:
        read.append(count.n if count else -1)
        if len(read) == 2:
            both_read.set()
        await both_read.wait()  # the second writer reads before the first writes
        return _more(count)

    async with anyio.create_task_group() as writers:
        writers.start_soon(first.update, "k", slow_more)
        writers.start_soon(second.update, "k", slow_more)
    assert sorted(read) == [0, 0, 1]  # one lost the race, read again, and landed
    assert (await first.get("k")).value == Count(2)


async def test_an_update_that_keeps_losing_gives_up_with_a_typed_conflict(client: Client) -> None:
    bucket = await TypedBucket.open(client, "test_typed_busy", Count)
    rival = await TypedBucket.open(client, "test_typed_busy", Count)
    tries: list[Count | None] = []

    async def always_beaten(count: Count | None) -> Count:
        tries.append(count)
        await rival.put("k", _more(count))  # another writer lands between read and write
        return _more(count)

    with pytest.raises(KeptChanging) as gave_up:
        await bucket.update("k", always_beaten, attempts=3)
    assert gave_up.value.code == codes.CONFLICT
    assert gave_up.value.message == "k in test_typed_busy kept changing under this update; retry"
    assert len(tries) == 3
    with pytest.raises(KeptChanging, match=r"^the count kept changing$"):
        await bucket.update("k", always_beaten, attempts=1, conflict="the count kept changing")


async def test_an_update_creates_a_missing_key_and_writes_nothing_when_told_so(
    client: Client,
) -> None:
    bucket = await TypedBucket.open(client, "test_typed_update", Count)
    assert await bucket.update("k", _more) == Count(1)
    assert await bucket.update("k", lambda count: None) is None
    assert await bucket.update("absent", lambda count: None) is None
    assert (await bucket.get("k")).value == Count(1)
    assert await bucket.find("absent") is None


async def test_a_write_or_delete_at_a_stale_revision_is_refused(client: Client) -> None:
    bucket = await TypedBucket.open(client, "test_typed_stale", Count)
    old = await bucket.create("k", Count(1))
    new = await bucket.replace("k", Count(2), old)
    with pytest.raises(ChangedSince):
        await bucket.replace("k", Count(3), old)
    with pytest.raises(ChangedSince):
        await bucket.delete("k", revision=old)
    await bucket.delete("k", revision=new)
    assert await bucket.find("k") is None


async def test_iterate_and_keys_keep_to_their_prefix(client: Client) -> None:
    bucket = await TypedBucket.open(client, "test_typed_prefix", Count)
    for n, key in enumerate(("a.1", "a.2", "ab.3", "b.1", "a.gone")):
        await bucket.put(key, Count(n))
    await bucket.purge("a.gone")
    found = sorted([(e.key, e.value.n) async for e in bucket.iterate("a.")])
    assert found == [("a.1", 0), ("a.2", 1)]
    assert sorted(await bucket.keys("a")) == ["a.1", "a.2", "ab.3"]
    assert len([e async for e in bucket.iterate()]) == 4


async def test_a_watch_sees_a_put_and_a_delete_of_its_key(client: Client) -> None:
    bucket = await TypedBucket.open(client, "test_typed_watch", Count)
    await bucket.put("other", Count(9))
    seen: list[Watched[Count]] = []
    ready = anyio.Event()

    async def follow() -> None:
        async with aclosing(bucket.watch("k", ready=ready.set)) as changes:
            async for change in changes:
                seen.append(change)
                if change.value is None:
                    return

    with anyio.fail_after(10):
        async with anyio.create_task_group() as watching:
            watching.start_soon(follow)
            await ready.wait()
            revision = await bucket.put("k", Count(1))
            await bucket.put("other", Count(10))
            await bucket.delete("k")
    assert [(c.key, c.value) for c in seen] == [("k", Count(1)), ("k", None)]
    assert seen[0].revision == revision


async def test_a_prefix_watch_gives_what_is_kept_then_changes_and_skips_what_does_not_decode(
    client: Client,
) -> None:
    bucket = await TypedBucket.open(client, "test_typed_watch_prefix", Count)
    await bucket.put("a.1", Count(1))
    await bucket.put("b.1", Count(2))
    seen: list[tuple[str, Count | None]] = []
    ready = anyio.Event()

    async def follow() -> None:
        async with aclosing(bucket.watch(prefix="a.", ready=ready.set)) as changes:
            async for change in changes:
                seen.append((change.key, change.value))
                if change.key == "a.end":
                    return

    raw = await open_bucket(client, "test_typed_watch_prefix")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as watching:
            watching.start_soon(follow)
            await ready.wait()
            assert seen == [("a.1", Count(1))]  # what was kept, before `ready`
            await bucket.put("b.2", Count(3))
            await raw.put("a.2", b"\xc1 not msgpack")
            await bucket.put("a.end", Count(4))
    assert seen == [("a.1", Count(1)), ("a.2", None), ("a.end", Count(4))]


async def test_a_bucket_holding_another_type_shares_the_bucket(client: Client) -> None:
    counts = await TypedBucket.open(client, "test_typed_beside", Count)
    marks = counts.holding(Mark)
    await marks.put("mark.1", Mark("x"))
    await counts.put("count.1", Count(1))
    assert sorted(await counts.keys()) == ["count.1", "mark.1"]
    assert (await marks.get("mark.1")).value == Mark("x")


class Mark(msgspec.Struct, frozen=True):
    text: str


async def test_a_reader_opening_only_an_existing_bucket_creates_none(client: Client) -> None:
    assert await TypedBucket.existing(client, "test_typed_not_there", Count) is None
    assert await TypedBucket.existing(client, "test_typed_not_there", Count) is None
    await (await TypedBucket.open(client, "test_typed_not_there", Count)).put("k", Count(1))
    found = await TypedBucket.existing(client, "test_typed_not_there", Count)
    assert found is not None
    assert (await found.get("k")).value == Count(1)
