"""The vault's operations on secrets: data keys per tenant, add, list, remove, read, rotate.

Data keys are unwrapped on first use and kept in memory for the life of the instance; a
rotation re-wraps each one under the new master key by compare-and-set, so an instance
that rotates and one that adds a tenant at the same moment cannot lose a key.
"""

from __future__ import annotations

import logging

from bastion.proto.vault import SecretInfo
from bastion.shared.errors import NotFound
from bastion.shared.sealing import SealError, open_sealed
from bastion.shared.secretnames import check_name, check_value
from bastion.vault.envelope import Keyring, new_data_key, open_secret, seal_secret
from bastion.vault.masterkey import MasterKey
from bastion.vault.store import VaultStore

__all__ = ["Keeper"]

logger = logging.getLogger(__name__)


class Keeper:
    """Secrets of every tenant, through one keyring and one store."""

    def __init__(self, store: VaultStore, keyring: Keyring) -> None:
        self._store = store
        self.keyring = keyring
        self._data_keys: dict[str, bytes] = {}

    async def check_keys(self) -> int:
        """Open every tenant's data key now, so a wrong master key fails at start.

        Raises:
            VaultKeyError: the keyring opens some tenant's data key not.
        """
        tenants = await self._store.tenants()
        for tenant in tenants:
            await self._data_key(tenant, create=False)
        return len(tenants)

    async def _data_key(self, tenant: str, *, create: bool) -> bytes | None:
        held = self._data_keys.get(tenant)
        if held is not None:
            return held
        found = await self._store.wrapped_key(tenant)
        if found is None:
            if not create:
                return None
            if await self._store.create_wrapped_key(
                tenant, self.keyring.wrap(tenant, key := new_data_key())
            ):
                self._data_keys[tenant] = key
                return key
            found = await self._store.wrapped_key(tenant)  # another instance made it first
            assert found is not None
        key = self.keyring.unwrap(tenant, found[0])
        self._data_keys[tenant] = key
        return key

    def open_transport(self, sealed: bytes, context: bytes) -> bytes:
        """Bytes sealed to the vault's transport key (of either master key held).

        Raises:
            SealError: sealed to no key this vault holds.
        """
        for key in self.keyring.keys:
            try:
                return open_sealed(key.transport_key(), sealed, context)
            except SealError:
                continue
        raise SealError(
            "the value was not sealed to this vault's key (the master key changed meanwhile?): "
            "run the command again"
        )

    async def add(self, tenant: str, name: str, sealed_value: bytes) -> tuple[int, bool]:
        """Keep a secret; its size in bytes and whether it replaced one."""
        check_name(name)
        value = self.open_transport(sealed_value, f"add {tenant} {name}".encode())
        check_value(name, value)
        data_key = await self._data_key(tenant, create=True)
        assert data_key is not None
        replaced = await self._store.put_secret(
            tenant, name, seal_secret(data_key, tenant, name, value)
        )
        logger.info("secret added", extra={"tenant": tenant, "secret": name})
        return len(value), replaced

    async def list(self, tenant: str) -> list[SecretInfo]:
        infos: list[SecretInfo] = []
        for name in await self._store.names(tenant):
            stored = await self._store.secret(tenant, name)
            if stored is not None:
                infos.append(SecretInfo(name=name, added_at=stored.added_at))
        return infos

    async def remove(self, tenant: str, name: str) -> None:
        if not await self._store.remove_secret(tenant, check_name(name)):
            raise _missing(tenant, name)
        logger.info("secret removed", extra={"tenant": tenant, "secret": name})

    async def read(self, tenant: str, name: str) -> str:
        """A secret's value, for a lease only.

        Raises:
            NotFound: the tenant has no secret of that name.
        """
        stored = await self._store.secret(tenant, name)
        data_key = await self._data_key(tenant, create=False) if stored is not None else None
        if stored is None or data_key is None:
            raise _missing(tenant, name)
        return open_secret(data_key, tenant, name, stored).decode()

    async def rotate(self, new: MasterKey) -> int:
        """Re-wrap every tenant's data key under `new`; the number of tenants re-wrapped."""
        rotated = self.keyring.rotated(new)
        count = 0
        for tenant in await self._store.tenants():
            while True:
                found = await self._store.wrapped_key(tenant)
                assert found is not None
                wrapped, revision = found
                data_key = rotated.unwrap(tenant, wrapped)
                if await self._store.replace_wrapped_key(
                    tenant, rotated.wrap(tenant, data_key), revision
                ):
                    break
            count += 1
        self.keyring = rotated
        logger.info(
            "master key rotated",
            extra={"tenants": count, "key_id": new.key_id, "previous": rotated.previous[0].key_id},
        )
        return count


def _missing(tenant: str, name: str) -> NotFound:
    return NotFound(
        f"tenant {tenant} has no secret {name}: add it with `bastion secret add {name} "
        f"--tenant {tenant}`, or see `bastion secret list --tenant {tenant}`"
    )
