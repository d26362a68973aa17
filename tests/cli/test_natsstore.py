"""A state dir from before NATS accounts keeps its streams: each is moved to its account."""

from __future__ import annotations

from pathlib import Path

import pytest

from bastion.cli.natsserver import free_port, running_nats_server, serving
from bastion.cli.natsstore import move_to_accounts
from bastion.proto import subjects
from bastion.shared.bus import connect
from bastion.shared.kv import open_bucket
from bastion.shared.natsconfig import SERVER_FILE, write_nats_config
from bastion.shared.settings import BusSettings, load_settings

pytestmark = pytest.mark.anyio


async def test_streams_of_the_global_account_are_moved_to_their_accounts(tmp_path: Path) -> None:
    old = tmp_path / "old"
    with running_nats_server(old) as url:
        async with connect(BusSettings(nats_url=url), "before") as client:
            secrets = await open_bucket(client, subjects.VAULT_SECRETS_BUCKET)
            await secrets.put("default.TOKEN", b"ciphertext")
            sessions = await open_bucket(client, subjects.SESSIONS_BUCKET)
            await sessions.put("0123456789abcdef", b"session")

    moved = move_to_accounts(old / "jetstream")
    assert set(moved) == {f"KV_{subjects.VAULT_SECRETS_BUCKET}", f"KV_{subjects.SESSIONS_BUCKET}"}
    assert move_to_accounts(old / "jetstream") == []

    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    users = write_nats_config(
        tmp_path / "new", listen=f"127.0.0.1:{port}", store_dir=str(old / "jetstream"), url=url
    )
    with serving(tmp_path / "new" / SERVER_FILE, port):
        vault = load_settings(BusSettings, users["vault"].env(url))
        orchestrator = load_settings(BusSettings, users["orchestrator"].env(url))
        async with connect(vault, "vault") as client:
            kv = await client.jetstream().key_value(subjects.VAULT_SECRETS_BUCKET)
            assert (await kv.get("default.TOKEN")).value == b"ciphertext"
        async with connect(orchestrator, "orchestrator") as client:
            kv = await client.jetstream().key_value(subjects.SESSIONS_BUCKET)
            assert (await kv.get("0123456789abcdef")).value == b"session"
