"""The vault's two JetStream KV buckets: wrapped data keys, and secrets' ciphertexts.

`bastion_vault_keys` holds one `WrappedKey` per tenant (key: the tenant);
`bastion_vault_secrets` one `StoredSecret` per secret (key: `<tenant>.<name>`; a name has
no dot, so the last dot splits them). Nothing in either is readable without the master key.
"""

from __future__ import annotations

from bastion.proto import subjects
from bastion.proto.vault import StoredSecret, WrappedKey
from bastion.shared.bus import Client
from bastion.shared.kv import AlreadyStored, ChangedSince, TypedBucket

__all__ = ["VaultStore"]


class VaultStore:
    """Reads and writes of wrapped keys and ciphertexts; no cryptography here."""

    def __init__(self, keys: TypedBucket[WrappedKey], secrets: TypedBucket[StoredSecret]) -> None:
        self._keys = keys
        self._secrets = secrets

    @classmethod
    async def open(cls, client: Client) -> VaultStore:
        """The store on both buckets, each created (file storage) if missing."""
        return cls(
            await TypedBucket.open(client, subjects.VAULT_KEYS_BUCKET, WrappedKey),
            await TypedBucket.open(client, subjects.VAULT_SECRETS_BUCKET, StoredSecret),
        )

    async def wrapped_key(self, tenant: str) -> tuple[WrappedKey, int] | None:
        """A tenant's wrapped data key and its revision, or None if it has none yet."""
        found = await self._keys.find(tenant)
        return None if found is None else (found.value, found.revision)

    async def create_wrapped_key(self, tenant: str, wrapped: WrappedKey) -> bool:
        """Keep a tenant's first data key; False if another instance kept one first."""
        try:
            await self._keys.create(tenant, wrapped)
        except AlreadyStored:
            return False
        return True

    async def replace_wrapped_key(self, tenant: str, wrapped: WrappedKey, revision: int) -> bool:
        """Replace a tenant's wrapped key if still at `revision` (compare-and-set)."""
        try:
            await self._keys.replace(tenant, wrapped, revision)
        except ChangedSince:
            return False
        return True

    async def tenants(self) -> list[str]:
        """Every tenant that has a data key."""
        return sorted(await self._keys.keys())

    async def put_secret(self, tenant: str, name: str, stored: StoredSecret) -> bool:
        """Keep a secret; True if it replaced one of the same name."""
        replaced = await self.secret(tenant, name) is not None
        await self._secrets.put(f"{tenant}.{name}", stored)
        return replaced

    async def secret(self, tenant: str, name: str) -> StoredSecret | None:
        found = await self._secrets.find(f"{tenant}.{name}")
        return None if found is None else found.value

    async def names(self, tenant: str) -> list[str]:
        """The names of a tenant's secrets, sorted."""
        keys = await self._secrets.keys()
        return sorted(
            name for owner, _, name in (key.rpartition(".") for key in keys) if owner == tenant
        )

    async def remove_secret(self, tenant: str, name: str) -> bool:
        """Forget a secret (its ciphertext purged); False if there was none."""
        if await self.secret(tenant, name) is None:
            return False
        await self._secrets.purge(f"{tenant}.{name}")
        return True
