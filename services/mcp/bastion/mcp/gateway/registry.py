"""Each tenant's upstream MCP servers and their pins, kept in JetStream KV.

One entry per server, key `<tenant>.<name>` in `bastion_mcp_servers`: how to run it, what
it was at its review (its name, version and protocol), the pinned key's fingerprint and
the pinned tools. Writes are compare-and-set, so two operators reviewing at once cannot
silently undo each other.
"""

from __future__ import annotations

from bastion.proto import subjects
from bastion.proto.mcp import McpServerRecord
from bastion.shared.bus import Client
from bastion.shared.errors import BastionError
from bastion.shared.kv import AlreadyStored, ChangedSince, TypedBucket

__all__ = ["Registry", "ServerExists", "StaleReview"]


class ServerExists(BastionError):
    code = "conflict"


class StaleReview(BastionError):
    code = "conflict"


def _key(tenant: str, name: str) -> str:
    return f"{tenant}.{name}"


class Registry:
    """Read and write the servers of every tenant."""

    def __init__(self, bucket: TypedBucket[McpServerRecord]) -> None:
        self._bucket = bucket

    @classmethod
    async def open(cls, client: Client) -> Registry:
        return cls(await TypedBucket.open(client, subjects.MCP_SERVERS_BUCKET, McpServerRecord))

    async def get(self, tenant: str, name: str) -> tuple[McpServerRecord, int]:
        """The server and its revision.

        Raises:
            NotFound: the tenant has no server of that name.
        """
        entry = await self._bucket.get(
            _key(tenant, name),
            missing=f"there is no MCP server {name} for tenant {tenant}: add it with "
            f"`bastion mcp add {name} -- COMMAND` (or `--url URL`); "
            "`bastion mcp list` shows those there are",
        )
        return entry.value, entry.revision

    async def add(self, record: McpServerRecord) -> None:
        """Keep a new server.

        Raises:
            ServerExists: the tenant has one of that name already.
        """
        try:
            await self._bucket.create(_key(record.tenant, record.name), record)
        except AlreadyStored:
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
            await self._bucket.replace(_key(record.tenant, record.name), record, revision)
        except ChangedSince:
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
        await self._bucket.delete(_key(tenant, name), revision=revision)

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
