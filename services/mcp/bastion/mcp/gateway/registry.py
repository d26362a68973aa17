"""Each tenant's upstream MCP servers and their pins, kept in JetStream KV.

One entry per server, key `<tenant>.<name>` in `bastion_mcp_servers`: how to run it, what
it was at its review (its name, version and protocol), the pinned key's fingerprint and
the pinned tools. Writes are compare-and-set, so two operators reviewing at once cannot
silently undo each other.

The service keeps every server in memory as the bucket's watch gives them (`follow`), so a
call reads its server's record without a round trip to JetStream (`current`). What this
process writes is in memory at once; what another writer (another replica) changes is
there as soon as the watch delivers it, and `follow` says so, for the connections to that
server to be closed.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus

from bastion.proto import subjects
from bastion.proto.mcp import McpServerRecord
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError
from bastion.shared.kv import AlreadyStored, ChangedSince, NotStored, TypedBucket

__all__ = ["Registry", "ServerExists", "StaleReview"]


class ServerExists(BastionError):
    code = "conflict"


class StaleReview(BastionError):
    code = "conflict"


def _key(tenant: str, name: str) -> str:
    return f"{tenant}.{name}"


def _missing(tenant: str, name: str) -> str:
    return (
        f"there is no MCP server {name} for tenant {tenant}: add it with "
        f"`bastion mcp add {name} -- COMMAND` (or `--url URL`); "
        "`bastion mcp list` shows those there are"
    )


class Registry:
    """Read and write the servers of every tenant."""

    def __init__(self, bucket: TypedBucket[McpServerRecord]) -> None:
        self._bucket = bucket
        self._known: dict[str, tuple[McpServerRecord | None, int]] = {}
        """Each server by key, as last written or watched, and its revision (None: removed)."""

    def _learn(self, key: str, record: McpServerRecord | None, revision: int) -> bool:
        """Keep what `revision` says of `key` unless a later revision is known; whether the
        record kept changed."""
        before = self._known.get(key)
        if before is not None and revision <= before[1]:
            return False
        self._known[key] = (record, revision)
        return before is None or before[0] != record

    async def follow(
        self,
        changed: Callable[[str, str], None],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep every server in memory as the bucket's watch gives it, until cancelled;
        started once those kept now are read. `changed(tenant, name)` is told of each server
        someone else changed or removed since this process last knew it."""
        async for change in self._bucket.watch(ready=task_status.started):
            if self._learn(change.key, change.value, change.revision):
                tenant, _, name = change.key.rpartition(".")
                changed(tenant, name)

    async def current(self, tenant: str, name: str) -> McpServerRecord:
        """The server as this process knows it now (read from the bucket only when it knows
        nothing of it).

        Raises:
            NotFound: the tenant has no server of that name.
        """
        known = self._known.get(_key(tenant, name))
        if known is None:
            record, revision = await self.get(tenant, name)
            self._learn(_key(tenant, name), record, revision)
            return record
        if known[0] is None:
            raise NotStored(_missing(tenant, name))
        return known[0]

    @classmethod
    async def open(cls, client: Client) -> Registry:
        return cls(await TypedBucket.open(client, subjects.MCP_SERVERS_BUCKET, McpServerRecord))

    async def get(self, tenant: str, name: str) -> tuple[McpServerRecord, int]:
        """The server and its revision.

        Raises:
            NotFound: the tenant has no server of that name.
        """
        entry = await self._bucket.get(_key(tenant, name), missing=_missing(tenant, name))
        return entry.value, entry.revision

    async def add(self, record: McpServerRecord) -> None:
        """Keep a new server.

        Raises:
            ServerExists: the tenant has one of that name already.
        """
        try:
            revision = await self._bucket.create(_key(record.tenant, record.name), record)
        except AlreadyStored:
            raise ServerExists(
                f"tenant {record.tenant} has an MCP server {record.name} already: review it "
                f"with `bastion mcp review {record.name}`, or remove it first "
                f"(`bastion mcp remove {record.name}`) to add another under that name"
            ) from None
        self._learn(_key(record.tenant, record.name), record, revision)

    async def replace(self, record: McpServerRecord, revision: int) -> None:
        """Write a reviewed server over the revision it was read at.

        Raises:
            StaleReview: someone else changed it since.
        """
        try:
            written = await self._bucket.replace(_key(record.tenant, record.name), record, revision)
        except ChangedSince:
            raise StaleReview(
                f"MCP server {record.name} was changed by someone else during this review: "
                "review it again"
            ) from None
        self._learn(_key(record.tenant, record.name), record, written)

    async def remove(self, tenant: str, name: str) -> None:
        """Forget a server and its pins.

        Raises:
            NotFound: the tenant has no server of that name.
        """
        _, revision = await self.get(tenant, name)
        await self._bucket.delete(_key(tenant, name), revision=revision)
        # The delete's own revision is later: `follow` then learns nothing new from it.
        self._known[_key(tenant, name)] = (None, revision)

    async def of_tenant(self, tenant: str) -> list[McpServerRecord]:
        """The tenant's servers, by name."""
        prefix = f"{tenant}."
        records = [
            entry
            async for entry in self._bucket.iterate(prefix)
            # another tenant's (a tenant's name may hold dots; a server's not)
            if "." not in entry.key.removeprefix(prefix)
        ]
        return [entry.value for entry in sorted(records, key=lambda entry: entry.key)]
