"""Following one KV key as the front door follows a parked call: its current value first,
then each change of it alone (a delete seen as no value); a bucket that is not there is
none to watch."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import msgspec

from bastion.shared.bus import Client
from bastion.shared.kv import TypedBucket


class State(msgspec.Struct, frozen=True):
    name: str


async def test_a_watched_key_gives_its_value_then_each_change_and_skips_other_keys(
    client: Client,
) -> None:
    bucket = await TypedBucket.open(client, "test_watching", State)
    await bucket.put("parked", State("pending"))
    seen: list[str | None] = []
    with anyio.fail_after(30):
        async with aclosing(bucket.watch("parked")) as changes:
            async for change in changes:
                seen.append(change.value.name if change.value else None)
                if change.value == State("pending"):
                    await bucket.put("another", State("not this key"))
                    await bucket.delete("parked")
                    await bucket.put("parked", State("running"))
                elif change.value == State("running"):
                    await bucket.put("parked", State("done"))
                elif change.value == State("done"):
                    break
    assert seen == ["pending", None, "running", "done"]


async def test_a_key_with_no_value_yet_is_watched_until_it_has_one(client: Client) -> None:
    bucket = await TypedBucket.open(client, "test_watching_later", State)
    with anyio.fail_after(30):
        async with aclosing(bucket.watch("later")) as changes:
            await bucket.put("later", State("now"))
            first = await anext(aiter(changes))
    assert first.value == State("now")


async def test_a_bucket_that_is_not_there_is_none_to_watch(client: Client) -> None:
    assert await TypedBucket.existing(client, "test_no_such_bucket", State) is None
