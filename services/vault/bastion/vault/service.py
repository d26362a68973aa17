"""The vault service's setup: its key checked at start, then its endpoints on the bus."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bastion.proto import subjects
from bastion.proto.vault import (
    AddSecret,
    KeyRotated,
    Lease,
    LeaseRequest,
    ListSecrets,
    RedactionRequest,
    RedactionValues,
    RemoveSecret,
    RotateKey,
    SecretAdded,
    SecretList,
    SecretRemoved,
    VaultKey,
    VaultKeyQuery,
)
from bastion.shared.audit import open_audit_stream
from bastion.shared.bus import Client
from bastion.shared.sealing import public_bytes
from bastion.shared.service import RequestContext, Service
from bastion.shared.version import VERSION
from bastion.vault.envelope import Keyring
from bastion.vault.keeper import Keeper
from bastion.vault.leasing import Leases, parse_nkey_names
from bastion.vault.masterkey import parse_key, replace_key_file
from bastion.vault.settings import VaultSettings, key_file, load_keys, parse_public_keys
from bastion.vault.store import VaultStore

__all__ = ["Vault", "vault_service"]

logger = logging.getLogger(__name__)


class Vault:
    """The endpoints' handlers."""

    def __init__(self, keeper: Keeper, leases: Leases, settings: VaultSettings) -> None:
        self._keeper = keeper
        self._leases = leases
        self._settings = settings

    async def key(self, _request: VaultKeyQuery, _context: RequestContext) -> VaultKey:
        return VaultKey(public_key=public_bytes(self._keeper.keyring.current.transport_key()))

    async def add(self, request: AddSecret, _context: RequestContext) -> SecretAdded:
        size, replaced = await self._keeper.add(request.tenant, request.name, request.sealed_value)
        return SecretAdded(name=request.name, size=size, replaced=replaced)

    async def list(self, request: ListSecrets, _context: RequestContext) -> SecretList:
        return SecretList(
            tenant=request.tenant, secrets=tuple(await self._keeper.list(request.tenant))
        )

    async def remove(self, request: RemoveSecret, _context: RequestContext) -> SecretRemoved:
        await self._keeper.remove(request.tenant, request.name)
        return SecretRemoved(name=request.name)

    async def rotate(self, request: RotateKey, _context: RequestContext) -> KeyRotated:
        new = parse_key(self._keeper.open_transport(request.sealed_key, b"rotate"), "the request")
        tenants = await self._keeper.rotate(new)
        updated = False
        if not self._settings.vault_master_key:
            # The key came from a file this process may write (`bastion up`'s): the new key
            # replaces it, so a restart opens the re-wrapped keys. A read-only mount (a
            # Kubernetes Secret) is updated by the operator instead.
            try:
                replace_key_file(key_file(self._settings), new)
                updated = True
            except OSError as error:
                logger.warning(
                    "the master key file was not updated: update it with the new key",
                    extra={"error": error.strerror},
                )
        return KeyRotated(tenants=tenants, key_id=new.key_id, key_file_updated=updated)

    async def lease(self, request: LeaseRequest, context: RequestContext) -> Lease:
        return await self._leases.lease(request, context.headers)

    async def redaction(
        self, request: RedactionRequest, context: RequestContext
    ) -> RedactionValues:
        return await self._leases.redaction(request, context.headers)


@asynccontextmanager
async def vault_service(client: Client, settings: VaultSettings) -> AsyncIterator[Service]:
    """The vault, once its master key opens every data key it keeps.

    Raises:
        VaultKeyError: no master key, an exposed one, or one that opens nothing here.
    """
    current, previous = load_keys(settings)
    keeper = Keeper(await VaultStore.open(client), Keyring(current, previous))
    tenants = await keeper.check_keys()
    logger.info("vault keys open", extra={"key_id": current.key_id, "tenants": tenants})
    leases = Leases(
        keeper,
        await open_audit_stream(client),
        parse_public_keys(settings.vault_lease_keys),
        frozenset(filter(None, (c.strip() for c in settings.vault_lease_callers.split(",")))),
        parse_nkey_names(settings.vault_caller_nkeys),
    )
    vault = Vault(keeper, leases, settings)
    service = Service("vault", VERSION, "Secrets encrypted at rest, leased to the sandbox only.")
    service.add_endpoint("key", subjects.VAULT_KEY, VaultKeyQuery, vault.key)
    service.add_endpoint("add", subjects.VAULT_ADD, AddSecret, vault.add)
    service.add_endpoint("list", subjects.VAULT_LIST, ListSecrets, vault.list)
    service.add_endpoint("remove", subjects.VAULT_REMOVE, RemoveSecret, vault.remove)
    service.add_endpoint("rotate", subjects.VAULT_ROTATE, RotateKey, vault.rotate)
    service.add_endpoint("lease", subjects.VAULT_LEASE, LeaseRequest, vault.lease)
    service.add_endpoint("redaction", subjects.VAULT_REDACTION, RedactionRequest, vault.redaction)
    yield service
