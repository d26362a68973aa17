"""Signed tool schemas through the whole plane: a server added with a public key has its
signed tools offered; a tampered schema, an unsigned tool and a rotated key are refused."""

from __future__ import annotations

from pathlib import Path

import msgspec

from bastion.mcp.gateway.signing import generate_private_key, private_key_pem, public_key_pem
from bastion.proto.errors import ErrorReply
from bastion.shared.bus import Client
from bastion.shared.settings import BusSettings
from tests.conftest import ServiceRunner
from tests.services.mcp_upstream_helpers import SERVERS, stdio_spec
from tests.services.test_mcp_gateway import add, plane, review, text_of
from tests.services.test_orchestrator import call, open_session


def signing_key(directory: Path) -> str:
    """A new key in the server's `signing.pem`; its public half, as PEM."""
    key = generate_private_key()
    (directory / "signing.pem").write_bytes(private_key_pem(key))
    return public_key_pem(key.public_key())


async def test_a_signed_server_is_accepted_and_every_broken_signature_is_refused(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    server = tmp_path / "server"
    server.mkdir()
    public = signing_key(server)
    spec = msgspec.structs.replace(stdio_spec(SERVERS / "signed.py", server), public_key_pem=public)
    # The server tampers without saying so: listed before every call, the session that was
    # offered greet has its next call refused (within the bound it would be the window
    # docs/upstream-mcp.md describes).
    async with plane(run_service, bus_settings, tmp_path / "state", pin_recheck_s=0):
        added = await add(client, "signed", spec)
        good = await open_session(client, autonomy="L3", mcp=["signed"])
        greeted = await call(client, good.session_id, "signed_greet", name="ada")

        (server / "mode").write_text("tamper")
        tampered = await open_session(client, autonomy="L3", mcp=["signed"])
        mid_session = await call(client, good.session_id, "signed_greet", name="bob")

        (server / "mode").write_text("unsigned")
        unsigned = await open_session(client, autonomy="L3", mcp=["signed"])

        (server / "mode").write_text("")
        signing_key(server)  # the server now signs with a key of its own choosing
        rotated = await open_session(client, autonomy="L3", mcp=["signed"])
        looked = await review(client, "signed")

    assert added.pinned
    assert {t.name: t.status for t in added.tools} == {"greet": "new", "store": "new"}
    assert {"signed_greet", "signed_store"} <= {t.name for t in good.tools}
    assert good.notices == ()
    assert text_of(greeted) == "hello ada"

    assert "signed_greet" not in {t.name for t in tampered.tools}
    assert "signed_store" in {t.name for t in tampered.tools}
    assert any("greet" in n for n in tampered.notices), tampered.notices
    assert isinstance(mid_session, ErrorReply) and mid_session.code == "tool_changed"

    assert "signed_store" not in {t.name for t in unsigned.tools}
    assert "signed_greet" in {t.name for t in unsigned.tools}
    assert any("store" in n for n in unsigned.notices), unsigned.notices

    assert not {"signed_greet", "signed_store"} & {t.name for t in rotated.tools}
    assert len(rotated.notices) == 2
    assert {t.name: t.status for t in looked.tools} == {"greet": "refused", "store": "refused"}
    assert all(t.flags for t in looked.tools)


async def test_a_server_with_a_key_that_signs_nothing_has_nothing_pinned(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spec = msgspec.structs.replace(
        stdio_spec(SERVERS / "misbehaving.py", tmp_path), public_key_pem=signing_key(elsewhere)
    )
    async with plane(run_service, bus_settings, tmp_path / "state"):
        added = await add(client, "plain", spec)
        session = await open_session(client, autonomy="L5", mcp=["plain"])
    assert {t.status for t in added.tools} == {"refused"}
    assert not any(
        t.name.startswith("plain_") and t.server == "plain" and t.upstream for t in session.tools
    )
