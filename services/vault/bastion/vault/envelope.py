"""Envelope encryption: data keys wrapped by the master keyring, values sealed by data keys.

Each tenant has one random 32-byte data key; each value is ChaCha20-Poly1305 under it with
a fresh nonce and associated data naming tenant and secret. The data key is itself
ChaCha20-Poly1305 under the master key, with associated data naming the tenant.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from bastion.proto.vault import StoredSecret, WrappedKey
from bastion.shared.errors import BastionError
from bastion.vault.masterkey import MasterKey, VaultKeyError

__all__ = ["Keyring", "SecretDamaged", "new_data_key", "open_secret", "seal_secret"]


class SecretDamaged(BastionError):
    """A stored ciphertext does not open under its tenant's data key (altered or moved)."""


def _key_context(tenant: str) -> bytes:
    return f"bastion vault data key {tenant}".encode()


def _secret_context(tenant: str, name: str) -> bytes:
    return f"bastion vault secret {tenant} {name}".encode()


class Keyring:
    """The current master key (it wraps), and during a rotation another that only opens."""

    def __init__(self, current: MasterKey, previous: tuple[MasterKey, ...] = ()) -> None:
        self.current = current
        self.previous = previous

    @property
    def keys(self) -> tuple[MasterKey, ...]:
        return (self.current, *self.previous)

    def rotated(self, new: MasterKey) -> Keyring:
        """A keyring whose current key is `new`, the old one still accepted for opening."""
        return Keyring(new, (self.current,))

    def wrap(self, tenant: str, data_key: bytes) -> WrappedKey:
        nonce = os.urandom(12)
        wrapped = ChaCha20Poly1305(self.current.key).encrypt(nonce, data_key, _key_context(tenant))
        return WrappedKey(
            key_id=self.current.key_id, nonce=nonce, wrapped=wrapped, created_at=datetime.now(UTC)
        )

    def unwrap(self, tenant: str, wrapped: WrappedKey) -> bytes:
        """The tenant's data key.

        Raises:
            VaultKeyError: no key of the keyring opens it; the sentence says what to do.
        """
        held = ", ".join(key.key_id for key in self.keys)
        for key in self.keys:
            if key.key_id != wrapped.key_id:
                continue
            try:
                return ChaCha20Poly1305(key.key).decrypt(
                    wrapped.nonce, wrapped.wrapped, _key_context(tenant)
                )
            except InvalidTag:
                break
        raise VaultKeyError(
            f"the master key does not open the vault's keys: tenant {tenant}'s data key is "
            f"wrapped under master key {wrapped.key_id}, and this vault holds {held}; give "
            "the vault the master key its secrets were added with (BASTION_VAULT_MASTER_KEY_FILE "
            "or BASTION_VAULT_MASTER_KEY), and during a rotation the other one as well "
            "(BASTION_VAULT_OTHER_MASTER_KEY_FILE)"
        )


def new_data_key() -> bytes:
    return ChaCha20Poly1305.generate_key()


def seal_secret(data_key: bytes, tenant: str, name: str, value: bytes) -> StoredSecret:
    nonce = os.urandom(12)
    ciphertext = ChaCha20Poly1305(data_key).encrypt(nonce, value, _secret_context(tenant, name))
    return StoredSecret(added_at=datetime.now(UTC), nonce=nonce, ciphertext=ciphertext)


def open_secret(data_key: bytes, tenant: str, name: str, stored: StoredSecret) -> bytes:
    """The value of a stored secret.

    Raises:
        SecretDamaged: it does not open under this tenant and name.
    """
    try:
        return ChaCha20Poly1305(data_key).decrypt(
            stored.nonce, stored.ciphertext, _secret_context(tenant, name)
        )
    except InvalidTag:
        raise SecretDamaged(
            f"the stored secret {name} of tenant {tenant} does not open under its data key: it "
            f"was altered or moved from another name; add it again with `bastion secret add {name}`"
        ) from None
