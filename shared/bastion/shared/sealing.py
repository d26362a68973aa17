"""Sealing bytes to one X25519 public key, so only its private key's holder opens them.

The format is written down in `bastion.proto.vault`: a version byte, an ephemeral public
key, a nonce, then ChaCha20-Poly1305 under a key derived with HKDF-SHA256. The context
(what the bytes are for) is bound both into the key and as associated data.
"""

from __future__ import annotations

import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bastion.shared.errors import InvalidInput

__all__ = ["SealError", "open_sealed", "public_bytes", "seal"]

_VERSION: Final = b"\x01"
_INFO: Final = b"bastion.v1.seal "
_HEADER: Final = 1 + 32 + 12


class SealError(InvalidInput):
    """Sealed bytes that do not open with this key for this context."""


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The raw 32 bytes of `key`'s public half."""
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _key(shared: bytes, ephemeral: bytes, recipient: bytes, context: bytes) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient, info=_INFO + context
    ).derive(shared)


def seal(recipient: bytes, plaintext: bytes, context: bytes) -> bytes:
    """`plaintext` sealed to the raw X25519 public key `recipient`, for `context` only.

    Raises:
        SealError: `recipient` is not a 32-byte X25519 public key.
    """
    try:
        peer = X25519PublicKey.from_public_bytes(recipient)
    except ValueError:
        raise SealError("the key to seal to is not a 32-byte X25519 public key") from None
    ephemeral = X25519PrivateKey.generate()
    ephemeral_public = public_bytes(ephemeral)
    key = _key(ephemeral.exchange(peer), ephemeral_public, recipient, context)
    nonce = os.urandom(12)
    return (
        _VERSION
        + ephemeral_public
        + nonce
        + ChaCha20Poly1305(key).encrypt(nonce, plaintext, context)
    )


def open_sealed(private: X25519PrivateKey, sealed: bytes, context: bytes) -> bytes:
    """The plaintext of `sealed`, which must have been sealed to `private`'s public key.

    Raises:
        SealError: another key, another context, or altered bytes.
    """
    if len(sealed) < _HEADER + 16 or sealed[:1] != _VERSION:
        raise SealError("the sealed bytes are not in Bastion's sealed format (version 1)")
    ephemeral_public, nonce, body = sealed[1:33], sealed[33:_HEADER], sealed[_HEADER:]
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(ephemeral_public))
        key = _key(shared, ephemeral_public, public_bytes(private), context)
        return ChaCha20Poly1305(key).decrypt(nonce, body, context)
    except (InvalidTag, ValueError):
        raise SealError(
            "the sealed bytes do not open with this key: they were sealed to another key, "
            "for another purpose, or altered on the way"
        ) from None
