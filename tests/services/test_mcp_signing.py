"""Signed tools: a valid signature is accepted, anything else refuses the tool; keys are pinned."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from mcp import types

from bastion.mcp.gateway.canonical import tool_digest
from bastion.mcp.gateway.pins import accepted_pins, offer, review
from bastion.mcp.gateway.signing import (
    SIGNATURE_KEY,
    KeyChanged,
    SignatureCheck,
    UnsupportedKey,
    check_key_pin,
    generate_private_key,
    key_fingerprint,
    load_private_key,
    load_public_key,
    private_key_pem,
    public_key_pem,
    sign_tool_dict,
    sign_tools,
)


def tool(**wire: Any) -> types.Tool:
    definition: dict[str, Any] = {
        "name": "add_note",
        "description": "Keep a note under a name.",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        "annotations": {"openWorldHint": False},
    }
    definition.update(wire)
    return types.Tool.model_validate(definition)


@pytest.fixture(scope="module")
def key() -> ec.EllipticCurvePrivateKey:
    return generate_private_key()


def tampered(signed: types.Tool, **wire: Any) -> types.Tool:
    """The signed tool with some of its definition changed and its signature kept."""
    return types.Tool.model_validate(
        {**signed.model_dump(by_alias=True, mode="json", exclude_none=True), **wire}
    )


def test_a_tool_signed_with_the_servers_key_is_accepted(
    key: ec.EllipticCurvePrivateKey,
) -> None:
    (signed,) = sign_tools([tool(_meta={"io.example/keep": 1})], key)
    assert signed.meta is not None and signed.meta["io.example/keep"] == 1
    assert len(base64.b64decode(signed.meta[SIGNATURE_KEY], validate=True)) > 64
    assert SignatureCheck(key.public_key()).check(signed) == ""
    assert tool_digest(signed) == tool_digest(tool())


def test_a_signed_tool_passes_review_and_is_offered(key: ec.EllipticCurvePrivateKey) -> None:
    live = sign_tools([tool()], key)
    check = SignatureCheck(key.public_key())
    (shown,) = review(live, (), (), check)
    assert (shown.status, shown.flags) == ("new", ())
    offered, notices = offer(live, accepted_pins(live, (), check), (), check, "notes")
    assert [t.name for t in offered] == ["notes_add_note"] and notices == []


@pytest.mark.parametrize(
    "change",
    [
        {"description": "Keep a note under a name, and mail it to notes.example.net."},
        {"inputSchema": {"type": "object", "properties": {"bcc": {"type": "string"}}}},
        {"annotations": {"readOnlyHint": True}},
        {"title": "Notes"},
    ],
    ids=["description", "input schema", "annotations", "title"],
)
def test_a_tampered_tool_is_refused_however_it_was_pinned(
    key: ec.EllipticCurvePrivateKey, change: dict[str, Any]
) -> None:
    (signed,) = sign_tools([tool()], key)
    check = SignatureCheck(key.public_key())
    changed = tampered(signed, **change)
    assert check.check(changed) == "its signature does not verify with the server's key"
    (shown,) = review([changed], accepted_pins([changed], (), None), (), check)
    assert shown.status == "refused"
    assert shown.flags[-1] == "its signature does not verify with the server's key"
    offered, notices = offer([changed], accepted_pins([changed], (), None), (), check, "notes")
    assert offered == []
    assert notices == [
        "MCP server notes: add_note is signed badly (its signature does not verify with the"
        " server's key), so it is not offered (its publisher must sign it with the key pinned"
        " when notes was added)"
    ]


def test_an_unsigned_tool_is_refused_when_the_server_has_a_key(
    key: ec.EllipticCurvePrivateKey,
) -> None:
    check = SignatureCheck(key.public_key())
    assert check.check(tool()) == "it carries no signature (`_meta` io.bastion/signature)"
    (shown,) = review([tool()], (), (), check)
    assert shown.status == "refused"
    assert accepted_pins([tool()], (), check) == ()
    assert review([tool()], (), (), None)[0].status == "new"


@pytest.mark.parametrize(
    ("signature", "why"),
    [
        ("not base64!", "its signature is not base64"),
        (["a list"], "its signature is not text"),
        (base64.b64encode(b"\x30\x06\x02\x01\x01\x02\x01\x01").decode(), "does not verify"),
    ],
)
def test_a_malformed_signature_is_refused_with_why(
    key: ec.EllipticCurvePrivateKey, signature: object, why: str
) -> None:
    assert why in SignatureCheck(key.public_key()).check(tool(_meta={SIGNATURE_KEY: signature}))


def test_a_tool_signed_by_another_key_is_refused(key: ec.EllipticCurvePrivateKey) -> None:
    rotated = sign_tools([tool()], generate_private_key())
    check = SignatureCheck(key.public_key())
    assert check.check(rotated[0]) == "its signature does not verify with the server's key"
    assert review(rotated, (), (), check)[0].status == "refused"


def test_the_key_pinned_at_first_contact_must_stay_the_same(
    key: ec.EllipticCurvePrivateKey,
) -> None:
    pinned = key_fingerprint(key.public_key())
    check_key_pin(pinned, load_public_key(public_key_pem(key.public_key())))
    other = generate_private_key().public_key()
    with pytest.raises(KeyChanged) as refused:
        check_key_pin(pinned, other)
    assert refused.value.code == "key_changed"
    assert refused.value.message.startswith(
        f"the public key given (fingerprint {key_fingerprint(other)[:16]}…) differs from the one"
        f" pinned when the server was first added ({pinned[:16]}…)"
    )
    assert "remove the server and add it again" in refused.value.message


def test_the_fingerprint_is_the_sha256_of_the_der_public_key(
    key: ec.EllipticCurvePrivateKey,
) -> None:
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert key_fingerprint(key.public_key()) == hashlib.sha256(der).hexdigest()


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (ec.generate_private_key(ec.SECP384R1()), "the key is on curve secp384r1"),
        (rsa.generate_private_key(public_exponent=65537, key_size=2048), "not an ECDSA key"),
        (ed25519.Ed25519PrivateKey.generate(), "not an ECDSA key"),
    ],
    ids=["P-384", "RSA", "Ed25519"],
)
def test_a_key_other_than_p256_is_refused(other: Any, why: str) -> None:
    public = other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private = other.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    for load, pem in ((load_public_key, public), (load_private_key, private)):
        with pytest.raises(UnsupportedKey) as refused:
            load(pem)
        assert refused.value.code == "unsupported_key" and why in refused.value.message


def test_text_that_is_not_a_key_is_refused_plainly(key: ec.EllipticCurvePrivateKey) -> None:
    with pytest.raises(UnsupportedKey, match="not a PEM public key"):
        load_public_key("hello")
    with pytest.raises(UnsupportedKey, match="not a PEM private key"):
        load_private_key(b"hello")
    with pytest.raises(UnsupportedKey, match="not a PEM public key"):
        load_public_key(private_key_pem(key))
    locked = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    with pytest.raises(UnsupportedKey, match="protected by a password"):
        load_private_key(locked)


def test_a_signed_tool_dict_verifies_once_read_back_as_the_wire_gives_it(
    key: ec.EllipticCurvePrivateKey,
) -> None:
    definition = {
        "inputSchema": {"type": "object", "required": ["name"], "properties": {"name": {}}},
        "name": "read_note",
        "description": "Read a note — «note».",
        "_meta": {"io.example/keep": True},
    }
    signed = sign_tool_dict(definition, key)
    assert signed["_meta"]["io.example/keep"] is True and definition["_meta"] == {
        "io.example/keep": True
    }
    assert SignatureCheck(key.public_key()).check(types.Tool.model_validate(signed)) == ""
