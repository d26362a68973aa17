"""The vault's settings: where its master key comes from and whom it leases to."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

import msgspec

from bastion.proto import subjects
from bastion.shared.errors import InvalidInput
from bastion.shared.natsperms import callers
from bastion.shared.settings import BusSettings
from bastion.shared.statedir import default_state_dir
from bastion.vault.masterkey import MasterKey, check_env_key, read_key_file

__all__ = ["VaultSettings", "default_key_file", "key_file", "load_keys", "parse_public_keys"]


def _default_state_dir() -> str:
    return str(default_state_dir())


def default_key_file(state_dir: Path) -> Path:
    """Where `bastion up` keeps the master key unless told otherwise."""
    return state_dir / "vault" / "master.key"


class VaultSettings(BusSettings, frozen=True, kw_only=True):
    """`vault_master_key` (base64) wins over `vault_master_key_file` (default
    `<state dir>/vault/master.key`); `vault_other_master_key_file` is accepted for
    opening (never wrapping) during a rotation; `vault_lease_keys` (base64 X25519 public keys, comma
    separated) are the only keys a lease is sealed to, when set."""

    state_dir: str = msgspec.field(default_factory=_default_state_dir)
    vault_master_key: str = ""
    vault_master_key_file: str = ""
    vault_other_master_key_file: str = ""
    vault_lease_keys: str = ""
    vault_lease_callers: str = ",".join(callers(subjects.VAULT_LEASE))
    """Who may lease, as the server stamps it on a request from another account
    (`Nats-Request-Info`): `ACCOUNT/user` or a whole `ACCOUNT`, comma separated."""
    vault_caller_nkeys: str = ""
    """The user each NATS nkey is, `NKEY=user` pairs comma-separated: the server stamps an
    nkey user's public key, read here as its name (for `BASTION_VAULT_LEASE_CALLERS` and the
    audit log). `bastion nats config` and `bastion up` write it into the vault's env."""


def key_file(settings: VaultSettings) -> Path:
    """The file the current master key is read from (and written to by a rotation)."""
    if settings.vault_master_key_file:
        return Path(settings.vault_master_key_file).expanduser()
    return default_key_file(Path(settings.state_dir).expanduser())


def load_keys(settings: VaultSettings) -> tuple[MasterKey, tuple[MasterKey, ...]]:
    """The current master key and the previous one (if a rotation is under way).

    Raises:
        VaultKeyError: a key is missing, exposed or malformed.
    """
    if settings.vault_master_key:
        current = check_env_key(settings.vault_master_key)
    else:
        current = read_key_file(key_file(settings))
    previous: tuple[MasterKey, ...] = ()
    if settings.vault_other_master_key_file:
        previous = (read_key_file(Path(settings.vault_other_master_key_file).expanduser()),)
    return current, previous


def parse_public_keys(text: str) -> frozenset[bytes]:
    """The lease recipients' public keys given in `vault_lease_keys`.

    Raises:
        InvalidInput: one is not a base64 32-byte key.
    """
    keys: set[bytes] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            key = base64.b64decode(item, validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise InvalidInput(
                "BASTION_VAULT_LEASE_KEYS holds something that is not a base64 X25519 public "
                "key (32 bytes): give the sandbox service's public keys, comma separated"
            )
        keys.add(key)
    return frozenset(keys)
