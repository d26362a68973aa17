"""`bastion mcp keygen|sign`: a publisher's key and signed tools, never overwriting a file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import types

from bastion.cli.main import main
from bastion.mcp.gateway.pins import review
from bastion.mcp.gateway.signing import (
    SIGNATURE_KEY,
    SignatureCheck,
    key_fingerprint,
    load_public_key,
)

TOOLS = [
    {
        "name": "read_note",
        "description": "Read a note by its name — «any».",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    {"name": "add_note", "inputSchema": {"type": "object"}, "_meta": {"io.example/x": 1}},
]


def bastion(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(["mcp", *argv])
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


@pytest.fixture
def published(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """A key made with `keygen`, and the public key it printed."""
    status, public, _ = bastion(capsys, "keygen", "--out", str(tmp_path / "private.pem"))
    assert status == 0
    return tmp_path / "private.pem", public


def test_keygen_writes_a_private_key_only_its_owner_reads_and_prints_the_public_key(
    published: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = published
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = serialization.load_pem_private_key(private.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert key_fingerprint(load_public_key(public)) == key_fingerprint(key.public_key())
    before = private.read_bytes()
    status, out, err = bastion(capsys, "keygen", "--out", str(private))
    assert (status, out) == (1, "")
    assert err == f"error: {private} exists; it is never overwritten: give a new path\n"
    assert private.read_bytes() == before


def test_signed_tools_verify_with_the_public_key_and_keep_their_definition(
    published: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = published
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    out_file = tmp_path / "signed.json"
    status, out, err = bastion(
        capsys, "sign", "--key", str(private), str(tmp_path / "tools.json"), "--out", str(out_file)
    )
    assert (status, out) == (0, "")
    assert err.startswith("signed 2 tools with the key of fingerprint ")
    signed = json.loads(out_file.read_text(encoding="utf-8"))
    assert [{k: v for k, v in t.items() if k != "_meta"} for t in signed] == [
        {k: v for k, v in t.items() if k != "_meta"} for t in TOOLS
    ]
    assert signed[1]["_meta"]["io.example/x"] == 1
    tools = [types.Tool.model_validate(t) for t in signed]
    check = SignatureCheck(load_public_key(public))
    assert [check.check(t) for t in tools] == ["", ""]
    assert [t.status for t in review(tools, (), (), check)] == ["new", "new"]


def test_sign_writes_to_standard_output_without_o(
    published: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS[:1]))
    status, out, _ = bastion(
        capsys, "sign", "--key", str(published[0]), str(tmp_path / "tools.json")
    )
    assert status == 0 and SIGNATURE_KEY in json.loads(out)[0]["_meta"]


def test_sign_never_overwrites_its_output(
    published: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    (tmp_path / "signed.json").write_text("mine")
    status, out, err = bastion(
        capsys, "sign", "--key", str(published[0]), str(tmp_path / "tools.json"),
        "--out", str(tmp_path / "signed.json"),
    )  # fmt: skip
    assert (status, out) == (1, "")
    assert "signed.json exists; it is never overwritten: give a new path" in err
    assert (tmp_path / "signed.json").read_text() == "mine"


def test_sign_refuses_a_key_other_than_p256_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "p384.pem").write_bytes(other)
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    status, out, err = bastion(
        capsys, "sign", "--key", str(tmp_path / "p384.pem"), str(tmp_path / "tools.json")
    )
    assert (status, out) == (1, "")
    assert err.startswith("error: the key is on curve secp384r1; Bastion takes only P-256")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "is not JSON"),
        ('{"tools": []}', "is not a JSON list of tool definitions"),
        ('[{"description": "no name"}]', "tool 0 of "),
    ],
)
def test_sign_says_what_is_wrong_with_the_tools_file(
    published: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    why: str,
) -> None:
    (tmp_path / "tools.json").write_text(content)
    status, _, err = bastion(
        capsys, "sign", "--key", str(published[0]), str(tmp_path / "tools.json")
    )
    assert status == 1 and why in err and err.startswith("error: ")
    status, _, err = bastion(capsys, "sign", "--key", str(tmp_path / "none.pem"), "tools.json")
    assert status == 1 and "cannot read the private key" in err
