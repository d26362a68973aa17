"""`bastion secret`: add, list, remove and rotate-key through the bus, never showing a value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import anyio

from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.vault import key_file, random_value, vault_settings


def bastion(
    nats_url: str, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bastion.cli", "secret", *args, "--nats", nats_url],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


async def cli(nats_url: str, *args: str, **options: object) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(partial(bastion, nats_url, *args, **options))  # type: ignore[arg-type]


async def test_secrets_are_added_listed_and_removed_and_no_value_is_ever_printed(
    run_service: ServiceRunner, nats_url: str, tmp_path: Path
) -> None:
    piped, from_env = random_value().decode(), random_value().decode()
    async with run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "v"))):
        added = await cli(nats_url, "add", "DEPLOY_TOKEN", stdin=piped + "\n")
        by_env = await cli(
            nats_url, "add", "PYPI_TOKEN", "--from-env", "MY_TOKEN", env={"MY_TOKEN": from_env}
        )
        table = await cli(nats_url, "list")
        as_json = await cli(nats_url, "list", "-o", "json")
        other = await cli(nats_url, "list", "--tenant", "acme")
        removed = await cli(nats_url, "remove", "DEPLOY_TOKEN")
        after = await cli(nats_url, "list")
    assert added.stdout == f"added secret DEPLOY_TOKEN ({len(piped)} bytes)\n", added.stderr
    assert by_env.stdout == f"added secret PYPI_TOKEN ({len(from_env)} bytes)\n"
    names = [line.split("  ")[0] for line in table.stdout.splitlines()]
    assert names == ["DEPLOY_TOKEN", "PYPI_TOKEN"] and "  added 20" in table.stdout
    listed = json.loads(as_json.stdout)
    assert [s["name"] for s in listed["items"]] == names
    assert set(listed["items"][0]) == {"kind", "name", "added_at"}
    assert other.stdout == "tenant acme has no secrets\n"
    assert removed.stdout == "removed secret DEPLOY_TOKEN\n"
    assert after.stdout.startswith("PYPI_TOKEN  added")
    for result in (added, by_env, table, as_json, removed, after):
        assert piped not in result.stdout + result.stderr
        assert from_env not in result.stdout + result.stderr


async def test_a_reserved_name_or_short_value_is_refused_before_anything_is_sent(
    nats_url: str,
) -> None:
    reserved = await cli(nats_url, "add", "LD_PRELOAD", stdin="a-long-enough-value")
    lower = await cli(nats_url, "add", "path", stdin="a-long-enough-value")
    short = await cli(nats_url, "add", "TOKEN", stdin="abc")
    assert reserved.returncode == 1 and "how programs are found or loaded" in reserved.stderr
    assert lower.returncode == 1 and "is not a secret's name" in lower.stderr
    assert short.returncode == 1 and "at least 6" in short.stderr and "abc" not in short.stderr


async def test_rotate_key_rewraps_and_a_restart_still_reads_every_secret(
    run_service: ServiceRunner, nats_url: str, tmp_path: Path
) -> None:
    master = key_file(tmp_path / "v")
    new = key_file(tmp_path / "new")
    async with run_service(vault_service, vault_settings(nats_url, master)):
        await cli(nats_url, "add", "TOKEN", stdin="value-number-one")
        rotated = await cli(nats_url, "rotate-key", "--new-key-file", str(new))
    async with run_service(vault_service, vault_settings(nats_url, master)):
        listed = await cli(nats_url, "list")
    assert "re-wrapped 1 tenants' data keys under master key" in rotated.stdout, rotated.stderr
    assert "master key file now holds the new key" in rotated.stdout
    assert listed.stdout.startswith("TOKEN  added")
