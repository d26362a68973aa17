"""The vault's two JetStream KV buckets: wrapped data keys, and secrets' ciphertexts.

`bastion_vault_keys` holds one `WrappedKey` per tenant (key: the tenant);
`bastion_vault_secrets` one `StoredSecret` per secret (key: `<tenant>.<name>`; a name has
no dot, so the last dot splits them). Nothing in either is readable without the master key.
"""

from __future__ import annotations

from dataclasses import dataclass

import nats.js.errors
from nats.js.kv import KeyValue

from bastion.proto import subjects
from bastion.proto.vault import StoredSecret, WrappedKey
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.kv import bucket_keys, open_bucket

__all__ = ["VaultStore"]


@dataclass(eq=False)
class VaultStore:
    """Reads and writes of wrapped keys and ciphertexts; no cryptography here."""

    client: Client
    keys: KeyValue
    secrets: KeyValue

    @classmethod
    async def open(cls, client: Client) -> VaultStore:
        """The store on both buckets, each created (file storage) if missing."""
        return cls(
            client,
            await open_bucket(client, subjects.VAULT_KEYS_BUCKET),
            await open_bucket(client, subjects.VAULT_SECRETS_BUCKET),
        )

    async def wrapped_key(self, tenant: str) -> tuple[WrappedKey, int] | None:
        """A tenant's wrapped data key and its revision, or None if it has none yet."""
        try:
            entry = await self.keys.get(tenant)
        except nats.js.errors.NotFoundError:  # never kept, or purged
            return None
        assert entry.value is not None and entry.revision is not None
        return decode(entry.value, WrappedKey), entry.revision

    async def create_wrapped_key(self, tenant: str, wrapped: WrappedKey) -> bool:
        """Keep a tenant's first data key; False if another instance kept one first."""
        try:
            await self.keys.create(tenant, encode(wrapped))
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def replace_wrapped_key(self, tenant: str, wrapped: WrappedKey, revision: int) -> bool:
        """Replace a tenant's wrapped key if still at `revision` (compare-and-set)."""
        try:
            await self.keys.update(tenant, encode(wrapped), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def tenants(self) -> list[str]:
        """Every tenant that has a data key."""
        return sorted(await bucket_keys(self.client, self.keys))

    async def put_secret(self, tenant: str, name: str, stored: StoredSecret) -> bool:
        """Keep a secret; True if it replaced one of the same name."""
        replaced = await self.secret(tenant, name) is not None
        await self.secrets.put(f"{tenant}.{name}", encode(stored))
        return replaced

    async def secret(self, tenant: str, name: str) -> StoredSecret | None:
        try:
            entry = await self.secrets.get(f"{tenant}.{name}")
        except nats.js.errors.NotFoundError:  # never kept, or purged
            return None
        assert entry.value is not None
        stored: StoredSecret = decode(entry.value, StoredSecret)
        return stored

    async def names(self, tenant: str) -> list[str]:
        """The names of a tenant's secrets, sorted."""
        keys = await bucket_keys(self.client, self.secrets)
        return sorted(
            name for owner, _, name in (key.rpartition(".") for key in keys) if owner == tenant
        )

    async def remove_secret(self, tenant: str, name: str) -> bool:
        """Forget a secret (its ciphertext purged); False if there was none."""
        if await self.secret(tenant, name) is None:
            return False
        await self.secrets.purge(f"{tenant}.{name}")
        return True
