"""Signed tools: ECDSA P-256 / SHA-256 over a tool's canonical JSON, and the pinned key.

A signed tool carries, in its `_meta` under `io.bastion/signature`, the base64 (standard
alphabet, padded) of the DER-encoded ECDSA signature of `canonical_tool_json(tool)` — which
leaves `_meta` out, so the signature does not sign itself. A server added with a public key
must sign every tool; the key's fingerprint (SHA-256 of its DER SubjectPublicKeyInfo) is
pinned at that first contact, and a different key is refused until the server is removed
and added again. `docs/signed-tools.md` is the publisher's version of this.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any, Final

import pydantic
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import types

from bastion.mcp.gateway.canonical import canonical_tool_json
from bastion.shared.errors import BastionError, InvalidInput

__all__ = [
    "KEY_CHANGED",
    "NO_SIGNATURE",
    "SIGNATURE_KEY",
    "UNSUPPORTED_KEY",
    "KeyChanged",
    "SignatureCheck",
    "UnsupportedKey",
    "check_key_pin",
    "generate_private_key",
    "key_fingerprint",
    "load_private_key",
    "load_public_key",
    "private_key_pem",
    "public_key_pem",
    "sign_tool_dict",
    "sign_tools",
]

SIGNATURE_KEY: Final = "io.bastion/signature"
"""Where in a tool's `_meta` its signature is."""
UNSUPPORTED_KEY: Final = "unsupported_key"
KEY_CHANGED: Final = "key_changed"
NO_SIGNATURE: Final = f"it carries no signature (`_meta` {SIGNATURE_KEY})"
_ECDSA: Final = ec.ECDSA(hashes.SHA256())


class UnsupportedKey(InvalidInput):
    """A key that is not an (unencrypted, PEM) ECDSA P-256 key."""

    code = UNSUPPORTED_KEY


class KeyChanged(BastionError):
    """The server's key is not the one pinned when it was added."""

    code = KEY_CHANGED

    def __init__(self, pinned: str, given: str) -> None:
        super().__init__(
            f"the public key given (fingerprint {given[:16]}…) differs from the one pinned when"
            f" the server was first added ({pinned[:16]}…); to trust the new key, remove the"
            " server and add it again with that key"
        )
        self.pinned = pinned
        self.given = given


_KINDS: Final = "keys (`bastion mcp keygen` makes one)"


def _unsupported(key: object) -> UnsupportedKey:
    curve = getattr(key, "curve", None)
    if not isinstance(curve, ec.EllipticCurve):
        return UnsupportedKey(f"the key is not an ECDSA key; Bastion takes only P-256 {_KINDS}")
    return UnsupportedKey(
        f"the key is on curve {curve.name}; Bastion takes only P-256 (secp256r1) {_KINDS}"
    )


def load_public_key(pem: str | bytes) -> ec.EllipticCurvePublicKey:
    """An ECDSA P-256 public key from PEM (`-----BEGIN PUBLIC KEY-----`), else UnsupportedKey."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise UnsupportedKey(
            "the public key is not a PEM public key (-----BEGIN PUBLIC KEY-----)"
        ) from None
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise _unsupported(key)


def load_private_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    """An unencrypted ECDSA P-256 private key from PEM, else UnsupportedKey."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise UnsupportedKey(
            "the private key is protected by a password; give an unencrypted PEM key"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise UnsupportedKey("the private key is not a PEM private key") from None
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise _unsupported(key)


def generate_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted: the file `bastion mcp keygen` writes (mode 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: ec.EllipticCurvePublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def key_fingerprint(key: ec.EllipticCurvePublicKey) -> str:
    """SHA-256 (hex) of the key's DER SubjectPublicKeyInfo: what a server record pins."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def check_key_pin(pinned_fingerprint: str, given_key: ec.EllipticCurvePublicKey) -> None:
    """Raise KeyChanged unless `given_key` is the key pinned at first contact."""
    given = key_fingerprint(given_key)
    if given != pinned_fingerprint:
        raise KeyChanged(pinned_fingerprint, given)


class SignatureCheck:
    """Checks tools' signatures against one server's pinned public key."""

    def __init__(self, key: ec.EllipticCurvePublicKey) -> None:
        self.key = key

    def check(self, tool: types.Tool) -> str:
        """ "" when the tool's signature verifies; else a sentence saying why not."""
        encoded = (tool.meta or {}).get(SIGNATURE_KEY)
        if encoded is None:
            return NO_SIGNATURE
        if not isinstance(encoded, str):
            return "its signature is not text"
        try:
            signature = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return "its signature is not base64"
        try:
            self.key.verify(signature, canonical_tool_json(tool), _ECDSA)
        except InvalidSignature:
            return "its signature does not verify with the server's key"
        return ""


def _signature(tool: types.Tool, private_key: ec.EllipticCurvePrivateKey) -> str:
    return base64.b64encode(private_key.sign(canonical_tool_json(tool), _ECDSA)).decode()


def sign_tools(
    tools: list[types.Tool], private_key: ec.EllipticCurvePrivateKey
) -> list[types.Tool]:
    """The tools with their signatures in `_meta` (for a server written in Python)."""
    return [
        tool.model_copy(
            update={"meta": {**(tool.meta or {}), SIGNATURE_KEY: _signature(tool, private_key)}}
        )
        for tool in tools
    ]


def sign_tool_dict(
    tool_dict: dict[str, Any], private_key: ec.EllipticCurvePrivateKey
) -> dict[str, Any]:
    """A tool definition as JSON (one of tools/list's `tools`), with its signature added.

    Raises InvalidInput when it is not a tool definition."""
    try:
        tool = types.Tool.model_validate(tool_dict)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the tool"
        raise InvalidInput(f"it is not an MCP tool definition ({where}: {first['msg']})") from None
    meta = tool_dict.get("_meta") or {}
    return {**tool_dict, "_meta": {**meta, SIGNATURE_KEY: _signature(tool, private_key)}}
