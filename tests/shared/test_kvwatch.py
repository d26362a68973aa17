"""Following one KV key: its current value first, then each change of it alone; a bucket
that is not there is a typed error."""

from __future__ import annotations

import anyio
import pytest

from bastion.shared.bus import Client
from bastion.shared.errors import Unavailable
from bastion.shared.kv import open_bucket
from bastion.shared.kvwatch import key_values


async def test_a_watched_key_gives_its_value_then_each_change_and_skips_deletes_and_others(
    client: Client,
) -> None:
    kv = await open_bucket(client, "test_watching")
    await kv.put("parked", b"pending")
    seen: list[bytes] = []
    with anyio.fail_after(30):
        async with key_values(client, "test_watching", "parked") as values:
            async for value in values:
                seen.append(value)
                if value == b"pending":
                    await kv.put("another", b"not this key")
                    await kv.delete("parked")
                    await kv.put("parked", b"running")
                elif value == b"running":
                    await kv.put("parked", b"done")
                else:
                    break
    assert seen == [b"pending", b"running", b"done"]


async def test_a_key_with_no_value_yet_is_watched_until_it_has_one(client: Client) -> None:
    kv = await open_bucket(client, "test_watching_later")
    with anyio.fail_after(30):
        async with key_values(client, "test_watching_later", "later") as values:
            await kv.put("later", b"now")
            first = await anext(aiter(values))
    assert first == b"now"


async def test_a_bucket_that_is_not_there_cannot_be_watched(client: Client) -> None:
    with pytest.raises(Unavailable) as refused:
        async with key_values(client, "test_no_such_bucket", "k"):
            pass
    assert "test_no_such_bucket cannot be watched" in refused.value.message
