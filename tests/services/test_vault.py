"""The vault keeps secrets encrypted under its master key and hands them out only sealed."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.proto.vault import (
    KeyRotated,
    LeasedValues,
    RedactionRequest,
    RedactionValues,
    RemoveSecret,
    RotateKey,
    SecretRemoved,
    VaultKey,
    VaultKeyQuery,
)
from bastion.shared.bus import Client, request
from bastion.shared.codec import decode
from bastion.shared.errors import InvalidInput, RemoteError
from bastion.shared.keyfiles import decode_key
from bastion.shared.sealing import SealError, open_sealed, public_bytes, seal
from bastion.shared.secretnames import check_name
from bastion.vault.masterkey import VaultKeyError
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.vault import (
    SESSION,
    add,
    expose,
    file_bytes,
    key_file,
    lease,
    names,
    owner_only,
    random_value,
    vault_settings,
    write_key,
)

CONTEXT = f"lease default {SESSION} c1".encode()


@pytest.fixture
def master(tmp_path: Path) -> Path:
    return key_file(tmp_path / "vault")


async def test_secrets_are_added_listed_by_name_and_removed_through_the_bus(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    value = random_value()
    async with run_service(vault_service, vault_settings(nats_url, master)):
        added = await add(client, "PYPI_TOKEN", value)
        await add(client, "DEPLOY_TOKEN", random_value())
        assert (added.name, added.size, added.replaced) == ("PYPI_TOKEN", len(value), False)
        assert await names(client) == ["DEPLOY_TOKEN", "PYPI_TOKEN"]
        assert await names(client, "other") == []
        removed = await request(
            client, subjects.VAULT_REMOVE, RemoveSecret(tenant="default", name="DEPLOY_TOKEN"),
            SecretRemoved, timeout_s=10,
        )  # fmt: skip
        assert removed.name == "DEPLOY_TOKEN" and await names(client) == ["PYPI_TOKEN"]
        with pytest.raises(RemoteError) as missing:
            await request(
                client, subjects.VAULT_REMOVE, RemoveSecret(tenant="default", name="DEPLOY_TOKEN"),
                SecretRemoved, timeout_s=10,
            )  # fmt: skip
    assert missing.value.code == "not_found"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("path", "capital letters, digits and underscores"),
        ("1TOKEN", "not starting with a digit"),
        ("HTTPS-PROXY", "capital letters"),
        ("PATH", "the sandbox sets it itself"),
        ("HOME", "the sandbox sets it itself"),
        ("LC_ALL", "the sandbox sets it itself"),
        ("HTTPS_PROXY", "where and how programs connect"),
        ("SSL_CERT_FILE", "where and how programs connect"),
        ("LD_PRELOAD", "how programs are found or loaded"),
        ("PYTHONPATH", "how programs are found or loaded"),
        ("NODE_OPTIONS", "how programs are found or loaded"),
        ("BASH_ENV", "how programs are found or loaded"),
        ("BASTION_NATS_URL", "Bastion's own settings"),
        ("NATS_URL", "Bastion's own settings"),
        ("A" * 129, "at most 128"),
    ],
)
async def test_reserved_and_malformed_names_are_refused_with_the_reason(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path, name: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as locally:
        check_name(name)
    assert words in locally.value.message
    async with run_service(vault_service, vault_settings(nats_url, master)):
        with pytest.raises(RemoteError) as refused:
            await add(client, name, random_value())
        assert await names(client) == []
    assert refused.value.code == "invalid_input" and words in refused.value.message


async def test_a_value_too_short_to_redact_is_refused_without_being_quoted(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    async with run_service(vault_service, vault_settings(nats_url, master)):
        with pytest.raises(RemoteError) as refused:
            await add(client, "SHORT", b"abc12")
    assert "at least 6" in refused.value.message and "abc12" not in refused.value.message


async def test_a_restarted_vault_keeps_every_secret(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    values = {f"TOKEN_{i}": random_value() for i in range(3)}
    async with run_service(vault_service, vault_settings(nats_url, master)):
        for name, value in values.items():
            await add(client, name, value)
        await add(client, "TOKEN_0", random_value(), tenant="other")
    sandbox = X25519PrivateKey.generate()
    async with run_service(vault_service, vault_settings(nats_url, master)):
        assert await names(client) == sorted(values)
        leased = await lease(client, public_bytes(sandbox), *values)
    opened = decode(open_sealed(sandbox, leased.sealed, CONTEXT), LeasedValues)
    assert dict(opened.values) == {name: value.decode() for name, value in values.items()}


async def test_a_wrong_master_key_is_a_clear_error_at_start(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path, tmp_path: Path
) -> None:
    async with run_service(vault_service, vault_settings(nats_url, master)):
        await add(client, "TOKEN", random_value())
    wrong = key_file(tmp_path / "elsewhere")
    with pytest.raises(VaultKeyError) as refused:
        async with run_service(vault_service, vault_settings(nats_url, wrong)):
            pass
    assert refused.value.message.startswith("the master key does not open the vault's keys:")
    assert "BASTION_VAULT_MASTER_KEY_FILE" in refused.value.message


async def test_a_master_key_file_others_may_read_is_refused(
    run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    expose(master)
    with pytest.raises(VaultKeyError) as refused:
        async with run_service(vault_service, vault_settings(nats_url, master)):
            pass
    assert "chmod 600" in refused.value.message and "0644" in refused.value.message


async def test_rotation_keeps_every_secret_and_the_old_key_opens_nothing_after(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path, tmp_path: Path
) -> None:
    old = file_bytes(master)
    value = random_value()
    new = key_file(tmp_path / "new")
    sandbox = X25519PrivateKey.generate()
    async with run_service(vault_service, vault_settings(nats_url, master)):
        await add(client, "TOKEN", value)
        await add(client, "TOKEN", random_value(), tenant="other")
        vault_key = await request(
            client, subjects.VAULT_KEY, VaultKeyQuery(), VaultKey, timeout_s=10
        )
        new_key = decode_key(file_bytes(new))
        assert new_key is not None
        rotated = await request(
            client, subjects.VAULT_ROTATE,
            RotateKey(sealed_key=seal(vault_key.public_key, new_key, b"rotate")),
            KeyRotated, timeout_s=30,
        )  # fmt: skip
        assert rotated.tenants == 2 and rotated.key_file_updated
        during = await lease(client, public_bytes(sandbox), "TOKEN")  # no downtime
    assert file_bytes(master) != old and owner_only(master)
    async with run_service(vault_service, vault_settings(nats_url, master)):
        after = await lease(client, public_bytes(sandbox), "TOKEN", call_id="c1")
    for leased in (during, after):
        opened = decode(open_sealed(sandbox, leased.sealed, CONTEXT), LeasedValues)
        assert opened.values == (("TOKEN", value.decode()),)
    stale = write_key(tmp_path / "stale" / "master.key", old)
    with pytest.raises(VaultKeyError) as refused:
        async with run_service(vault_service, vault_settings(nats_url, stale)):
            pass
    assert "does not open the vault's keys" in refused.value.message


async def test_a_lease_opens_only_with_the_sandbox_key_for_that_call(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    sandbox, other = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    async with run_service(vault_service, vault_settings(nats_url, master)):
        await add(client, "TOKEN", random_value())
        leased = await lease(client, public_bytes(sandbox), "TOKEN")
    with pytest.raises(SealError):
        open_sealed(other, leased.sealed, CONTEXT)
    with pytest.raises(SealError):
        open_sealed(sandbox, leased.sealed, f"lease default {SESSION} c2".encode())
    assert open_sealed(sandbox, leased.sealed, CONTEXT)


async def test_only_the_allowed_sandbox_key_may_receive_a_lease(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    sandbox, intruder = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    allowed = base64.b64encode(public_bytes(sandbox)).decode()
    async with run_service(
        vault_service, vault_settings(nats_url, master, vault_lease_keys=allowed)
    ):
        await add(client, "TOKEN", random_value())
        with pytest.raises(RemoteError) as refused:
            await lease(client, public_bytes(intruder), "TOKEN")
        assert await lease(client, public_bytes(sandbox), "TOKEN")
    assert "BASTION_VAULT_LEASE_KEYS" in refused.value.message


async def test_a_redaction_set_is_the_tenants_values_only_sealed_to_an_allowed_key(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    sandbox, intruder = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    allowed = base64.b64encode(public_bytes(sandbox)).decode()

    async def redaction_set(key: X25519PrivateKey) -> RedactionValues:
        ask = RedactionRequest(session_id=SESSION, tenant="us", public_key=public_bytes(key))
        given: RedactionValues = await request(
            client, subjects.VAULT_REDACTION, ask, RedactionValues, timeout_s=10
        )
        return given

    async with run_service(
        vault_service, vault_settings(nats_url, master, vault_lease_keys=allowed)
    ):
        ours, theirs = random_value(), random_value()
        await add(client, "OUR_TOKEN", ours, tenant="us")
        await add(client, "THEIR_TOKEN", theirs, tenant="them")
        given = await redaction_set(sandbox)
        with pytest.raises(RemoteError) as refused:
            await redaction_set(intruder)
    assert given.names == ("OUR_TOKEN",)
    opened = open_sealed(sandbox, given.sealed, f"redaction us {SESSION}".encode())
    assert decode(opened, LeasedValues).values == (("OUR_TOKEN", ours.decode()),)
    with pytest.raises(SealError):  # a lease's context does not open it
        open_sealed(sandbox, given.sealed, f"lease us {SESSION} c1".encode())
    assert "BASTION_VAULT_LEASE_KEYS" in refused.value.message


async def test_a_lease_of_another_tenants_secret_is_refused(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    sandbox = X25519PrivateKey.generate()
    async with run_service(vault_service, vault_settings(nats_url, master)):
        await add(client, "THEIR_TOKEN", random_value(), tenant="them")
        with pytest.raises(RemoteError) as refused:
            await lease(client, public_bytes(sandbox), "THEIR_TOKEN", tenant="us")
    assert refused.value.code == "not_found" and "tenant us has no secret THEIR_TOKEN" in str(
        refused.value
    )


async def test_every_read_is_audited_with_who_which_call_and_name_never_the_value(
    client: Client, run_service: ServiceRunner, nats_url: str, master: Path
) -> None:
    value = random_value()
    sandbox = X25519PrivateKey.generate()
    async with run_service(vault_service, vault_settings(nats_url, master)):
        await add(client, "TOKEN", value)
        await add(client, "OTHER_TOKEN", random_value())
        await lease(client, public_bytes(sandbox), "TOKEN", "OTHER_TOKEN", call_id="call-7")
        with pytest.raises(RemoteError):
            await lease(client, public_bytes(sandbox), "MISSING", call_id="call-8")
    js = client.jetstream()
    records = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(subjects.AUDIT_STREAM, seq, next=True)
        except Exception:
            break
        assert msg.data is not None and msg.seq is not None
        assert value not in msg.data
        records.append(decode(msg.data, AuditRecord))
        seq = msg.seq + 1
    reads = [(r.call_id, r.outcome, r.summary) for r in records if r.action == "secret_read"]
    assert reads == [
        ("call-7", "leased", "secret TOKEN read for the call"),
        ("call-7", "leased", "secret OTHER_TOKEN read for the call"),
        ("call-8", "refused", "secrets MISSING refused (not_found)"),
    ]
    assert all(r.by.startswith("key ") and r.session_id == SESSION for r in records)
