"""Following one key of a JetStream KV bucket: each value it takes, as it takes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import nats.errors

from bastion.shared.bus import Client
from bastion.shared.errors import Unavailable

__all__ = ["key_values"]


@asynccontextmanager
async def key_values(client: Client, bucket: str, key: str) -> AsyncIterator[AsyncIterator[bytes]]:
    """The values `key` of `bucket` takes: its current one first (if it has one), then each
    change, until the block ends; a delete is skipped. The bucket must exist (its owner
    made it); the watch only reads.

    Raises:
        Unavailable: the bucket cannot be watched (it is missing, or JetStream refused).
    """
    try:
        kv = await client.jetstream().key_value(bucket)
        watcher = await kv.watch(key)
    except nats.errors.Error as error:
        raise Unavailable(
            f"the KV bucket {bucket} cannot be watched ({error}): is JetStream running, and "
            "may this service's NATS user read it?"
        ) from None

    async def values() -> AsyncIterator[bytes]:
        async for entry in watcher:
            if entry is not None and entry.value and entry.operation not in ("DEL", "PURGE"):
                yield entry.value

    try:
        yield values()
    finally:
        with anyio.CancelScope(shield=True):
            await watcher.stop()  # type: ignore[no-untyped-call]
