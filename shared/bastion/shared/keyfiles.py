"""Key files on disk: 32 random bytes, base64 on one line, readable by their owner only.

The vault's master key (`<state dir>/vault/master.key`) and the sandbox service's lease key
(`<state dir>/sandbox/lease.key`, an X25519 private key) are both kept this way; `bastion
up` creates each one that is missing. Other private files (the front door's tokens file)
are created by `create_owner_only` too.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from bastion.shared.errors import InvalidInput

__all__ = [
    "KEY_BYTES",
    "create_key_file",
    "create_owner_only",
    "decode_key",
    "read_owner_only",
    "read_x25519_key",
]

KEY_BYTES: Final = 32


def create_owner_only(path: Path, content: bytes) -> bool:
    """Write `content` to `path` (0600, its directory 0700) unless it exists; True if
    written."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as file:
        file.write(content)
    return True


def create_key_file(path: Path) -> bool:
    """Write 32 new random bytes to `path` (0600, its directory 0700) unless it exists;
    True if written."""
    return create_owner_only(path, base64.b64encode(os.urandom(KEY_BYTES)) + b"\n")


def decode_key(data: bytes) -> bytes | None:
    """32 key bytes from raw bytes or their base64 (white space around ignored), or None."""
    if len(data) == KEY_BYTES:
        return data
    try:
        decoded = base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return decoded if len(decoded) == KEY_BYTES else None


def read_owner_only(path: Path) -> bytes:
    """The bytes of `path`, a file no one but its owner may read.

    Raises:
        OSError: it cannot be read.
        PermissionError: group or others may read, write or run it (says the mode).
    """
    mode = path.stat().st_mode  # follows a Kubernetes Secret's ..data symlink
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionError(f"mode {stat.S_IMODE(mode):04o}")
    return path.read_bytes()


def read_x25519_key(path: Path) -> X25519PrivateKey:
    """The X25519 private key kept in `path`.

    Raises:
        InvalidInput: missing, exposed to others, or not 32 bytes.
    """
    try:
        key = decode_key(read_owner_only(path))
    except PermissionError as exposed:
        raise InvalidInput(
            f"the key at {path} may be read by others than its owner ({exposed}): "
            f"`chmod 600 {path}`"
        ) from None
    except OSError as error:
        raise InvalidInput(f"cannot read the key at {path}: {error.strerror}") from None
    if key is None:
        raise InvalidInput(f"the key at {path} is not 32 bytes, raw or base64")
    return X25519PrivateKey.from_private_bytes(key)
