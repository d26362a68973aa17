"""JetStream KV buckets the way every Bastion store keeps one: opened, and read, written,
changed by compare-and-set, listed and watched as one msgspec type (`TypedBucket`).

Values are msgpack (`bastion.shared.codec`), as on the bus. A key with an empty value (a
marker NATS left where an entry expired) reads as absent. A key is read, created and
changed with the same JetStream messages nats-py's `KeyValue` sends, answered on the
client's answer inbox (`bastion.shared.bus.ask_jetstream`, `send_stored`) and decoded with
msgspec: what a call pays in the runtime for each, not in nats-py's request machinery.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, overload

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from bastion.proto import errors as codes
from bastion.shared.bus import Client, ask_jetstream, decode_jetstream_answer, send_stored
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BadRequest, BastionError, NotFound

__all__ = [
    "AlreadyStored",
    "ChangedSince",
    "Entry",
    "KeptChanging",
    "NotStored",
    "TypedBucket",
    "Watched",
    "bucket_keys",
    "open_bucket",
    "replicas",
    "use_replicas",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")

_DELETED: Final = ("DEL", "PURGE")
_WRONG_LAST_SEQUENCE: Final = (10071, 10164)
"""JetStream's error codes for a write expecting a revision the key is no longer at."""
_PAUSE_S: Final = 0.005
"""A retried compare-and-set waits this many times its attempt's number (mod 10) first, so
writers racing for one key spread out instead of colliding again at once."""

_TIMEOUT_S: Final = 5.0
"""How long a read or write of a key waits for JetStream (nats-py's default, as
`Client.jetstream()` gives)."""
_KEY: Final = re.compile(r"[-/_=.a-zA-Z0-9]+")
"""A key as nats-py's `KeyValue` takes one (not starting or ending with a dot)."""
_EXPECTED_LAST: Final = "Nats-Expected-Last-Subject-Sequence"
_KV_OPERATION: Final = b"KV-Operation"

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
        if (msg.headers or {}).get("KV-Operation") in _DELETED:
            live.pop(key, None)
        else:
            live[key] = None
        if msg.seq is None:
            break
        seq = msg.seq + 1
    return list(live)


def _check_key(key: str) -> None:
    if not key or key[0] == "." or key[-1] == "." or not _KEY.fullmatch(key):
        raise nats.js.errors.InvalidKeyError(key)


class _StoredMsg(msgspec.Struct):
    """A stored message as `STREAM.MSG.GET` answers it (its headers and data in base64,
    which msgspec decodes)."""

    subject: str = ""
    seq: int = 0
    hdrs: bytes | None = None
    data: bytes | None = None


class _MsgGot(msgspec.Struct):
    message: _StoredMsg | None = None
    error: dict[str, Any] | None = None


_msg_got = msgspec.json.Decoder(_MsgGot)


def _operation(hdrs: bytes | None) -> str:
    """The `KV-Operation` header of a stored message's headers, or empty."""
    if not hdrs:
        return ""
    for line in hdrs.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip() == _KV_OPERATION:
            return value.strip().decode()
    return ""


class NotStored(NotFound):
    """Nothing is kept under the key asked for."""


class AlreadyStored(BastionError):
    """A create found the key taken."""

    code = codes.CONFLICT


class ChangedSince(BastionError):
    """A write at a revision found the key at another one: someone else wrote first."""

    code = codes.CONFLICT


class KeptChanging(BastionError):
    """A compare-and-set lost its race every time it was tried."""

    code = codes.CONFLICT


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A value read from a bucket and the revision it was read at."""

    key: str
    value: T
    revision: int


@dataclass(frozen=True)
class Watched(Generic[T]):
    """A key's change seen by a watch: its new value, or None when it was deleted, purged,
    expired or does not decode (that last one logged)."""

    key: str
    value: T | None
    revision: int


class TypedBucket(Generic[T]):
    """One KV bucket whose values are all `value_type`."""

    def __init__(self, client: Client, kv: KeyValue, bucket: str, value_type: type[T]) -> None:
        self._client = client
        self._kv = kv
        self._type = value_type
        self.name = bucket
        """The bucket's name."""
        self._stream = f"KV_{bucket}"
        self._pre = f"$KV.{bucket}."

    @classmethod
    async def open(
        cls, client: Client, bucket: str, value_type: type[T], *, ttl_s: float | None = None
    ) -> TypedBucket[T]:
        """The bucket `bucket`, created as `open_bucket` creates one if missing."""
        kv = await open_bucket(client, bucket, ttl_s=ttl_s)
        return cls(client, kv, bucket, value_type)

    @classmethod
    async def existing(
        cls, client: Client, bucket: str, value_type: type[T]
    ) -> TypedBucket[T] | None:
        """The bucket `bucket` if it exists (None if not): for a reader that must not
        create what the store that owns it creates."""
        try:
            kv = await client.jetstream().key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            return None
        return cls(client, kv, bucket, value_type)

    def holding(self, value_type: type[U]) -> TypedBucket[U]:
        """This bucket, for values of another type kept beside these (under other keys)."""
        return TypedBucket(self._client, self._kv, self.name, value_type)

    def _decoded(self, value: bytes) -> T:
        found: T = decode(value, self._type)
        return found

    async def find(self, key: str) -> Entry[T] | None:
        """The value under `key` and its revision, or None if there is none."""
        if self._kv._direct:  # the bucket's stream serves direct gets: nats-py's are lean
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
            if not entry.value or entry.revision is None:
                return None
            return Entry(key, self._decoded(entry.value), entry.revision)
        found = await self._last(key)
        if found is None or _operation(found.hdrs) in _DELETED:
            return None
        if not found.data or not found.seq:
            return None
        return Entry(key, self._decoded(found.data), found.seq)

    async def _last(self, key: str) -> _StoredMsg | None:
        """The stream's last message of `key` (a delete marker too), or None: the
        `STREAM.MSG.GET` nats-py's `KeyValue.get` sends, with its errors."""
        _check_key(key)
        subject = f"{self._pre}{key}"
        try:
            reply = await ask_jetstream(
                self._client,
                f"$JS.API.STREAM.MSG.GET.{self._stream}",
                msgspec.json.encode({"last_by_subj": subject}),
                timeout_s=_TIMEOUT_S,
            )
        except nats.errors.NoRespondersError:
            raise nats.js.errors.ServiceUnavailableError from None
        got = decode_jetstream_answer(_msg_got, reply.data, "the stream's answer")
        if got.error is not None:
            try:
                nats.js.errors.APIError.from_error(got.error)
            except nats.js.errors.NotFoundError:
                return None
        if got.message is None or got.message.subject != subject:
            return None
        return got.message

    async def _write(self, key: str, payload: bytes, last: int | None) -> int:
        """`payload` stored under `key` (at revision `last` only, when given: 0 for a key
        never written); its revision. The publish nats-py's `KeyValue` sends.

        Raises:
            nats.js.errors.KeyWrongLastSequenceError: the key is not at `last`.
        """
        _check_key(key)
        headers = None if last is None else {_EXPECTED_LAST: str(last)}
        stored = await send_stored(
            self._client, f"{self._pre}{key}", payload, headers=headers, timeout_s=_TIMEOUT_S
        )
        try:
            return await stored.sequence()
        except nats.js.errors.APIError as error:
            if error.err_code in _WRONG_LAST_SEQUENCE:
                raise nats.js.errors.KeyWrongLastSequenceError(
                    description=error.description
                ) from None
            raise

    async def get(self, key: str, *, missing: str | None = None) -> Entry[T]:
        """The value under `key` and its revision.

        Raises:
            NotStored: there is none; its message is `missing` when given.
        """
        found = await self.find(key)
        if found is None:
            raise NotStored(
                missing
                or f"nothing is kept under {key} in {self.name}: it was never stored, or was "
                "removed or expired; check the key, or store it first"
            )
        return found

    async def create(self, key: str, value: T) -> int:
        """Keep `value` under `key` if nothing is kept there; its revision.

        Raises:
            AlreadyStored: something is.
        """
        payload = encode(value)
        try:
            return await self._write(key, payload, 0)
        except nats.js.errors.KeyWrongLastSequenceError:
            # a key deleted or purged is created again over its marker (as nats-py does)
            found = await self._last(key)
            if found is None or _operation(found.hdrs) not in _DELETED:
                raise AlreadyStored(
                    f"{key} is kept in {self.name} already: read it and change it instead"
                ) from None
        try:
            return await self._write(key, payload, found.seq)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise AlreadyStored(
                f"{key} is kept in {self.name} already: read it and change it instead"
            ) from None

    async def put(self, key: str, value: T) -> int:
        """Keep `value` under `key`, whatever was there; its revision."""
        return await self._write(key, encode(value), None)

    async def replace(self, key: str, value: T, revision: int) -> int:
        """Write `value` over the value at `revision` (compare-and-set); its new revision.

        Raises:
            ChangedSince: the key is at another revision now (or gone).
        """
        try:
            return await self._write(key, encode(value), revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise ChangedSince(
                f"{key} in {self.name} changed since it was read: read it again"
            ) from None

    @overload
    async def update(
        self,
        key: str,
        change: Callable[[T | None], Awaitable[T]],
        *,
        attempts: int = ...,
        conflict: str | None = ...,
    ) -> T: ...
    @overload
    async def update(
        self,
        key: str,
        change: Callable[[T | None], T],
        *,
        attempts: int = ...,
        conflict: str | None = ...,
    ) -> T: ...
    @overload
    async def update(
        self,
        key: str,
        change: Callable[[T | None], T | None],
        *,
        attempts: int = ...,
        conflict: str | None = ...,
    ) -> T | None: ...
    async def update(
        self,
        key: str,
        change: Callable[[T | None], T | None] | Callable[[T | None], Awaitable[T]],
        *,
        attempts: int = 5,
        conflict: str | None = None,
    ) -> T | None:
        """`change` applied to the value under `key` (None when there is none) and written by
        compare-and-set (a create when there was none); read and applied again when another
        writer came first, up to `attempts` times. `change` may be a coroutine function; it
        returns None to write nothing. What was written (or None).

        Raises:
            KeptChanging: every attempt lost its race; its message is `conflict` when given.
            Whatever `change` raises.
        """
        for attempt in range(attempts):
            if attempt:
                await anyio.sleep(_PAUSE_S * (attempt % 10))
            found = await self.find(key)
            changed = change(None if found is None else found.value)
            wanted = await changed if inspect.isawaitable(changed) else changed
            if wanted is None:
                return None
            try:
                if found is None:
                    await self.create(key, wanted)
                else:
                    await self.replace(key, wanted, found.revision)
            except (AlreadyStored, ChangedSince):
                continue
            return wanted
        raise KeptChanging(
            conflict or f"{key} in {self.name} kept changing under this update; retry"
        )

    async def delete(self, key: str, *, revision: int | None = None) -> None:
        """Forget `key` (an absent key is no error); only if still at `revision`, when given.

        Raises:
            ChangedSince: the key is at another revision now.
        """
        try:
            await self._kv.delete(key, last=revision)
        except nats.js.errors.BadRequestError as error:
            # nats-py turns a lost race into KeyWrongLastSequenceError on writes, not deletes
            if error.err_code not in _WRONG_LAST_SEQUENCE:
                raise
            raise ChangedSince(
                f"{key} in {self.name} changed since it was read: read it again"
            ) from None

    async def purge(self, key: str) -> None:
        """Forget `key` and every revision of it kept."""
        await self._kv.purge(key)

    async def keys(self, prefix: str = "") -> list[str]:
        """The live keys starting with `prefix`, in no set order."""
        return [k for k in await bucket_keys(self._client, self._kv) if k.startswith(prefix)]

    async def iterate(self, prefix: str = "") -> AsyncGenerator[Entry[T], None]:
        """Every live entry whose key starts with `prefix` (one removed meanwhile left out)."""
        for key in await self.keys(prefix):
            found = await self.find(key)
            if found is not None:
                yield found

    async def watch(
        self,
        key: str | None = None,
        *,
        prefix: str = "",
        ready: Callable[[], object] | None = None,
    ) -> AsyncGenerator[Watched[T], None]:
        """The last change of `key` (or of every key starting with `prefix`) kept now, then
        each change as it comes, until the iteration is left (`contextlib.aclosing` it when
        leaving early). `ready` is called once what was kept at the start has been given.
        """
        subject = key if key is not None else prefix + ">" if prefix.endswith(".") else ">"
        watcher = await self._kv.watch(subject)
        called = ready is None
        try:
            async for entry in watcher:
                if entry is not None and (key is not None or entry.key.startswith(prefix)):
                    yield self._watched(entry)
                if not called and (entry is None or entry.delta == 0):
                    called = True
                    assert ready is not None
                    ready()
        finally:
            with anyio.CancelScope(shield=True):
                await watcher.stop()  # type: ignore[no-untyped-call]

    def _watched(self, entry: KeyValue.Entry) -> Watched[T]:
        revision = entry.revision or 0
        if entry.operation in _DELETED or not entry.value:
            return Watched(entry.key, None, revision)
        try:
            return Watched(entry.key, self._decoded(entry.value), revision)
        except BadRequest:
            logger.error(
                "a value in a bucket does not decode; it is taken as absent",
                extra={"bucket": self.name, "key": entry.key},
            )
            return Watched(entry.key, None, revision)
