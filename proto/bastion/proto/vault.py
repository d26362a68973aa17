"""The vault's messages: operators add, list and remove secrets; the sandbox leases them.

No message here ever carries a secret value in clear. A value travels only sealed to one
X25519 public key (`Sealed` bytes, format below): from the CLI to the vault (sealed to the
vault's transport key, `VaultKey`), and from the vault to the sandbox service (a `Lease`,
sealed to the public key the sandbox service sends in its `LeaseRequest`).

Sealed format (version 1), all lengths fixed except the ciphertext:

    0x01 | ephemeral X25519 public key (32) | nonce (12) | ChaCha20-Poly1305 ciphertext+tag

The key is HKDF-SHA256 of the X25519 shared secret, salt = ephemeral public key +
recipient public key, info = `bastion.v1.seal ` + the context; the associated data is
the context too, so a sealed value opens only for what it was sealed for: `add <tenant>
<name>`, `rotate`, `lease <tenant> <session> <call id>`, or `redaction <tenant> <session>`.
A lease's plaintext, and a redaction set's, is the msgpack of `LeasedValues`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final

import msgspec

from bastion.proto._base import Identifier, Message, SessionId

__all__ = [
    "MAX_LEASE_NAMES",
    "MAX_SECRET_BYTES",
    "MIN_SECRET_BYTES",
    "AddSecret",
    "KeyRotated",
    "Lease",
    "LeaseRequest",
    "LeasedValues",
    "ListSecrets",
    "RedactionRequest",
    "RedactionValues",
    "RemoveSecret",
    "RotateKey",
    "SecretAdded",
    "SecretInfo",
    "SecretList",
    "SecretName",
    "SecretRemoved",
    "StoredSecret",
    "VaultKey",
    "VaultKeyQuery",
    "WrappedKey",
]

MIN_SECRET_BYTES: Final = 6
"""A shorter value could not be cut out of output without cutting unrelated text too."""
MAX_SECRET_BYTES: Final = 4096
"""A value is one environment variable, not a file: bounded so a lease fits a pipe."""
MAX_LEASE_NAMES: Final = 12

SecretName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
"""A secret's name as sent; the vault checks it is an environment variable's name it accepts
(the rules and the reserved names are in `bastion.shared.secretnames`)."""

Sealed = Annotated[bytes, msgspec.Meta(max_length=64 * 1024)]
PublicKey = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]


class VaultKeyQuery(Message, frozen=True, kw_only=True, tag="vault.key_query"):
    """Ask for the public key values are sealed to on their way into the vault."""


class VaultKey(Message, frozen=True, kw_only=True, tag="vault.key"):
    """The vault's transport public key (X25519, raw 32 bytes)."""

    public_key: PublicKey


class AddSecret(Message, frozen=True, kw_only=True, tag="vault.add"):
    """Keep a secret for `tenant`, its value sealed to the vault's key (`add <tenant> <name>`)."""

    tenant: Identifier
    name: SecretName
    sealed_value: Sealed


class SecretAdded(Message, frozen=True, kw_only=True, tag="vault.added"):
    """The secret is kept; `size` is its length in bytes (never the value)."""

    name: SecretName
    size: int
    replaced: bool = False


class ListSecrets(Message, frozen=True, kw_only=True, tag="vault.list"):
    """The names of a tenant's secrets."""

    tenant: Identifier


class SecretInfo(Message, frozen=True, kw_only=True, tag="vault.secret_info"):
    """A secret's name and when it was added: nothing about its value."""

    name: SecretName
    added_at: datetime


class SecretList(Message, frozen=True, kw_only=True, tag="vault.secret_list"):
    """A tenant's secrets, sorted by name."""

    tenant: Identifier
    secrets: tuple[SecretInfo, ...] = ()


class RemoveSecret(Message, frozen=True, kw_only=True, tag="vault.remove"):
    """Forget one of a tenant's secrets."""

    tenant: Identifier
    name: SecretName


class SecretRemoved(Message, frozen=True, kw_only=True, tag="vault.removed"):
    name: SecretName


class RotateKey(Message, frozen=True, kw_only=True, tag="vault.rotate"):
    """Re-wrap every tenant's data key under a new master key, sealed to the vault (`rotate`)."""

    sealed_key: Sealed


class KeyRotated(Message, frozen=True, kw_only=True, tag="vault.rotated"):
    """How many tenants' data keys were re-wrapped, and the new master key's id."""

    tenants: int
    key_id: Annotated[str, msgspec.Meta(max_length=64)]
    key_file_updated: bool = False


class LeaseRequest(Message, frozen=True, kw_only=True, tag="vault.lease"):
    """Lease the named secrets for one call, sealed to the sandbox service's `public_key`."""

    session_id: SessionId
    tenant: Identifier
    call_id: Annotated[str, msgspec.Meta(max_length=64)]
    names: tuple[Annotated[str, msgspec.Meta(pattern=r"^[A-Z_][A-Z0-9_]*$")], ...] = ()
    public_key: bytes = b""
    """The sandbox service's X25519 public key (32 raw bytes); the lease opens only with its
    private key."""


class Lease(Message, frozen=True, kw_only=True, tag="vault.leased"):
    """The values of one call's secrets, sealed (`lease <tenant> <session> <call id>`)."""

    names: tuple[SecretName, ...]
    sealed: Sealed


class LeasedValues(Message, frozen=True, kw_only=True, tag="vault.values"):
    """A lease's plaintext, once opened by the sandbox service: name → value pairs."""

    values: tuple[tuple[SecretName, str], ...] = ()


class RedactionRequest(Message, frozen=True, kw_only=True, tag="vault.redaction_request"):
    """All of a tenant's secret values, sealed to `public_key`, only to cut them out of what
    a session's calls return: a value one call leased may have been written anywhere since."""

    session_id: SessionId
    tenant: Identifier
    public_key: bytes = b""


class RedactionValues(Message, frozen=True, kw_only=True, tag="vault.redaction_values"):
    """A tenant's secret values, sealed (`redaction <tenant> <session>`): `LeasedValues`."""

    names: tuple[SecretName, ...] = ()
    sealed: Annotated[bytes, msgspec.Meta(max_length=4 * 1024 * 1024)]


class WrappedKey(Message, frozen=True, kw_only=True, tag="vault.wrapped_key"):
    """A tenant's data key as kept in `bastion_vault_keys`: wrapped by master key `key_id`.

    ChaCha20-Poly1305 under the master key, associated data `bastion vault data key
    <tenant>`, so a wrapped key cannot be moved to another tenant.
    """

    key_id: Annotated[str, msgspec.Meta(max_length=64)]
    nonce: bytes
    wrapped: bytes
    created_at: datetime


class StoredSecret(Message, frozen=True, kw_only=True, tag="vault.stored_secret"):
    """A secret as kept in `bastion_vault_secrets` under `<tenant>.<name>`.

    ChaCha20-Poly1305 under the tenant's data key, associated data `bastion vault secret
    <tenant> <name>`, so a ciphertext opens under its own tenant and name only.
    """

    added_at: datetime
    nonce: bytes
    ciphertext: bytes
