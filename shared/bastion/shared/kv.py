"""Opening a JetStream KV bucket the way every Bastion store keeps one."""

from __future__ import annotations

import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from bastion.shared.bus import Client

__all__ = ["open_bucket"]


async def open_bucket(client: Client, bucket: str, *, ttl_s: float | None = None) -> KeyValue:
    """The KV bucket `bucket`, created if missing: file storage (it survives a restart of
    NATS), one revision per key (compare-and-set needs no more), entries kept `ttl_s` when
    given. An existing bucket is taken as it is."""
    js = client.jetstream()
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        return await js.create_key_value(
            KeyValueConfig(bucket=bucket, history=1, storage=StorageType.FILE, ttl=ttl_s)
        )
