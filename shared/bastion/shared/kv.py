"""Opening a JetStream KV bucket the way every Bastion store keeps one."""

from __future__ import annotations

import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from bastion.shared.bus import Client

__all__ = ["bucket_keys", "open_bucket", "replicas", "use_replicas"]

_replicas = 1


def use_replicas(count: int) -> None:
    """How many copies JetStream keeps of every bucket and stream this process creates
    (`BASTION_KV_REPLICAS`; 3 on a three-node cluster). Set once, when the process starts;
    an existing bucket keeps its own."""
    global _replicas  # noqa: PLW0603 (one process-wide setting, read from its settings once)
    _replicas = count


def replicas() -> int:
    """The copies a bucket or stream created now is kept in."""
    return _replicas


async def open_bucket(client: Client, bucket: str, *, ttl_s: float | None = None) -> KeyValue:
    """The KV bucket `bucket`, created if missing: file storage (it survives a restart of
    NATS), one revision per key (compare-and-set needs no more), entries kept `ttl_s` when
    given, `replicas()` copies. An existing bucket is taken as it is."""
    js = client.jetstream()
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        return await js.create_key_value(
            KeyValueConfig(
                bucket=bucket,
                history=1,
                storage=StorageType.FILE,
                ttl=ttl_s,
                replicas=_replicas,
            )
        )


async def bucket_keys(client: Client, kv: KeyValue) -> list[str]:
    """Every live key of the bucket, read from its stream up to the last sequence.

    nats-py's `KeyValue.keys()` can answer empty under load: it decides there is nothing
    more to read from the consumer's pending count, which may already be zero while the
    delivered entries wait in the client. Reading the stream by sequence has an end that
    does not depend on timing.
    """
    status = await kv.status()
    stream = status.stream_info.config.name or f"KV_{status.bucket}"
    prefix = f"$KV.{status.bucket}."
    js = client.jetstream()
    seq, last = status.stream_info.state.first_seq, status.stream_info.state.last_seq
    live: dict[str, None] = {}
    while seq <= last:
        try:
            msg = await js.get_msg(stream, seq, subject=f"{prefix}>", next=True)
        except nats.js.errors.NotFoundError:
            break
        key = (msg.subject or "").removeprefix(prefix)
        if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            live.pop(key, None)
        else:
            live[key] = None
        if msg.seq is None:
            break
        seq = msg.seq + 1
    return list(live)
