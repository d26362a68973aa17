"""Helpers for the vault's tests: settings with a key file, and the operator's requests."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from bastion.proto import subjects
from bastion.proto.vault import (
    AddSecret,
    Lease,
    LeaseRequest,
    ListSecrets,
    SecretAdded,
    SecretList,
    VaultKey,
    VaultKeyQuery,
)
from bastion.shared.bus import Client, request
from bastion.shared.keyfiles import create_key_file
from bastion.shared.sealing import seal
from bastion.vault.settings import VaultSettings

SESSION = "0123456789abcdef"


def key_file(directory: Path, name: str = "master.key") -> Path:
    path = directory / name
    create_key_file(path)
    return path


def vault_settings(nats_url: str, master: Path, **fields: str) -> VaultSettings:
    return VaultSettings(
        nats_url=nats_url, state_dir=str(master.parent), vault_master_key_file=str(master),
        **fields,
    )  # fmt: skip


async def add(client: Client, name: str, value: bytes, tenant: str = "default") -> SecretAdded:
    key: VaultKey = await request(
        client, subjects.VAULT_KEY, VaultKeyQuery(), VaultKey, timeout_s=10
    )
    sealed = seal(key.public_key, value, f"add {tenant} {name}".encode())
    added: SecretAdded = await request(
        client, subjects.VAULT_ADD, AddSecret(tenant=tenant, name=name, sealed_value=sealed),
        SecretAdded, timeout_s=10,
    )  # fmt: skip
    return added


async def names(client: Client, tenant: str = "default") -> list[str]:
    found: SecretList = await request(
        client, subjects.VAULT_LIST, ListSecrets(tenant=tenant), SecretList, timeout_s=10
    )
    return [info.name for info in found.secrets]


async def lease(
    client: Client, public_key: bytes, *names: str, tenant: str = "default", call_id: str = "c1"
) -> Lease:
    leased: Lease = await request(
        client, subjects.VAULT_LEASE,
        LeaseRequest(session_id=SESSION, tenant=tenant, call_id=call_id, names=names,
                     public_key=public_key),
        Lease, timeout_s=10,
    )  # fmt: skip
    return leased


def random_value() -> bytes:
    return base64.b64encode(os.urandom(24))


def file_bytes(path: Path) -> bytes:
    return path.read_bytes()


def owner_only(path: Path) -> bool:
    return path.stat().st_mode & 0o077 == 0


def expose(path: Path) -> None:
    path.chmod(0o644)


def write_key(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    path.chmod(0o600)
    return path
