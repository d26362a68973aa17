"""Each tenant's upstream MCP servers and their pins, kept in JetStream KV.

One entry per server, key `<tenant>.<name>` in `bastion_mcp_servers`: how to run it, what
it was at its review (its name, version and protocol), the pinned key's fingerprint and
the pinned tools. Writes are compare-and-set, so two operators reviewing at once cannot
silently undo each other.
"""

from __future__ import annotations

import nats.js.errors
from nats.js.kv import KeyValue

from bastion.proto import subjects
from bastion.proto.mcp import McpServerRecord
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.errors import BastionError, NotFound
from bastion.shared.kv import bucket_keys, open_bucket

__all__ = ["Registry", "ServerExists", "StaleReview"]


class ServerExists(BastionError):
    code = "conflict"


class StaleReview(BastionError):
    code = "conflict"


def _key(tenant: str, name: str) -> str:
    return f"{tenant}.{name}"


class Registry:
    """Read and write the servers of every tenant."""

    def __init__(self, client: Client, kv: KeyValue) -> None:
        self._client = client
        self._kv = kv

    @classmethod
    async def open(cls, client: Client) -> Registry:
        return cls(client, await open_bucket(client, subjects.MCP_SERVERS_BUCKET))

    async def get(self, tenant: str, name: str) -> tuple[McpServerRecord, int]:
        """The server and its revision.

        Raises:
            NotFound: the tenant has no server of that name.
        """
        try:
            entry = await self._kv.get(_key(tenant, name))
        except nats.js.errors.KeyNotFoundError:
            raise NotFound(
                f"there is no MCP server {name} for tenant {tenant}: add it with "
                f"`bastion mcp add {name} -- COMMAND` (or `--url URL`); "
                "`bastion mcp list` shows those there are"
            ) from None
        assert entry.value is not None and entry.revision is not None
        return decode(entry.value, McpServerRecord), entry.revision

    async def add(self, record: McpServerRecord) -> None:
        """Keep a new server.

        Raises:
            ServerExists: the tenant has one of that name already.
        """
        try:
            await self._kv.create(_key(record.tenant, record.name), encode(record))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise ServerExists(
                f"tenant {record.tenant} has an MCP server {record.name} already: review it "
                f"with `bastion mcp review {record.name}`, or remove it first "
                f"(`bastion mcp remove {record.name}`) to add another under that name"
            ) from None

    async def replace(self, record: McpServerRecord, revision: int) -> None:
        """Write a reviewed server over the revision it was read at.

        Raises:
            StaleReview: someone else changed it since.
        """
        try:
            await self._kv.update(_key(record.tenant, record.name), encode(record), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise StaleReview(
                f"MCP server {record.name} was changed by someone else during this review: "
                "review it again"
            ) from None

    async def remove(self, tenant: str, name: str) -> None:
        """Forget a server and its pins.

        Raises:
            NotFound: the tenant has no server of that name.
        """
        _, revision = await self.get(tenant, name)
        await self._kv.delete(_key(tenant, name), last=revision)

    async def of_tenant(self, tenant: str) -> list[McpServerRecord]:
        """The tenant's servers, by name."""
        prefix = f"{tenant}."
        records = []
        for key in sorted(await bucket_keys(self._client, self._kv)):
            if not key.startswith(prefix) or "." in key.removeprefix(prefix):
                continue  # another tenant's (a tenant's name may hold dots; a server's not)
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue  # removed while listing
            if entry.value is not None:
                records.append(decode(entry.value, McpServerRecord))
        return records
