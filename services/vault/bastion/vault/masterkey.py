"""The master key: where it comes from, how it is checked, and what it wraps.

It comes, in this order, from `BASTION_VAULT_MASTER_KEY` (32 bytes, base64), or from the
file `BASTION_VAULT_MASTER_KEY_FILE` (default `<state dir>/vault/master.key`: 32 raw bytes
or their base64 on one line; a Kubernetes Secret mounted as a file is read the same way).
A file that others than its owner may read is refused. During a rotation a second key
(`BASTION_VAULT_OTHER_MASTER_KEY_FILE`: the new one before the rotation, or the old one
after) is accepted for opening, never for wrapping.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from bastion.shared.errors import BastionError
from bastion.shared.keyfiles import KEY_BYTES, decode_key, read_owner_only

__all__ = [
    "KEY_BYTES",
    "MasterKey",
    "VaultKeyError",
    "check_env_key",
    "parse_key",
    "read_key_file",
    "replace_key_file",
]


class VaultKeyError(BastionError):
    """The master key is missing, unreadable, exposed, or does not open the vault's keys."""


@dataclass(frozen=True)
class MasterKey:
    """A 32-byte master key, its public id, and the transport key derived from it."""

    key: bytes

    @property
    def key_id(self) -> str:
        """16 hex digits naming the key (a hash: it says which key, not what it is)."""
        return hashlib.sha256(b"bastion vault master key id\0" + self.key).hexdigest()[:16]

    def transport_key(self) -> X25519PrivateKey:
        """The X25519 key values are sealed to on their way in: the same on every replica."""
        seed = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"bastion vault transport key"
        ).derive(self.key)
        return X25519PrivateKey.from_private_bytes(seed)

    def __repr__(self) -> str:
        return f"MasterKey(key_id={self.key_id})"


def parse_key(data: bytes, where: str) -> MasterKey:
    """A master key from 32 raw bytes or their base64 (surrounding white space ignored).

    Raises:
        VaultKeyError: neither; the sentence names `where` it came from.
    """
    key = decode_key(data)
    if key is None:
        raise VaultKeyError(
            f"the master key in {where} is not {KEY_BYTES} bytes, raw or base64: make one with "
            "`head -c 32 /dev/urandom | base64`"
        )
    return MasterKey(key)


def read_key_file(path: Path) -> MasterKey:
    """The master key kept in `path`, which only its owner may read.

    Raises:
        VaultKeyError: the file is missing, unreadable, readable by others, or not a key.
    """
    try:
        data = read_owner_only(path)
    except FileNotFoundError:
        raise VaultKeyError(
            f"there is no master key at {path}: `bastion up` creates one; otherwise write 32 "
            "random bytes there (mode 0600), or set BASTION_VAULT_MASTER_KEY"
        ) from None
    except PermissionError as exposed:
        raise VaultKeyError(
            f"the master key at {path} may be read by others than its owner ({exposed}): "
            f"`chmod 600 {path}` (for a Kubernetes Secret, defaultMode: 0400)"
        ) from None
    except OSError as error:
        raise VaultKeyError(f"cannot read the master key at {path}: {error.strerror}") from None
    return parse_key(data, str(path))


def replace_key_file(path: Path, key: MasterKey) -> None:
    """Put `key` in `path` atomically (0600): a crash leaves the old key or the new one."""
    temporary = path.with_name(path.name + ".new")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(base64.b64encode(key.key) + b"\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def check_env_key(value: str) -> MasterKey:
    """The master key given in BASTION_VAULT_MASTER_KEY."""
    return parse_key(value.encode(), "BASTION_VAULT_MASTER_KEY")
