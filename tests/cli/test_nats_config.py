"""`bastion nats config` writes a config nats-server runs, and env files services connect with."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from bastion.shared.natsconfig import read_env_file
from bastion.shared.natsperms import GRANTS
from bastion.shared.natsserver import free_port, serving
from bastion.shared.statedir import find_bus_settings

pytestmark = pytest.mark.anyio

CONNECTION_VARIABLES = {
    "BASTION_NATS_URL",
    "BASTION_NATS_USER",
    "BASTION_NATS_PASSWORD",
    "BASTION_NATS_INBOX_PREFIX",
}


def nats_config(
    out: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bastion.cli", "nats", "config", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_the_reply_window_is_the_setting_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BASTION_")}
    default = nats_config(tmp_path / "default", env=env)
    assert default.returncode == 0, default.stderr
    auth = (tmp_path / "default" / "auth.conf").read_text()
    assert 'allow_responses: { max: 1, expires: "120000ms" }' in auth
    assert '"0s"' not in auth  # the server reads 0 as its own default, not as no limit
    short = nats_config(tmp_path / "short", env={**env, "BASTION_REPLY_WINDOW_S": "2.5"})
    assert short.returncode == 0, short.stderr
    assert 'expires: "2500ms"' in (tmp_path / "short" / "auth.conf").read_text()
    bad = nats_config(tmp_path / "bad", env={**env, "BASTION_REPLY_WINDOW_S": "0"})
    assert bad.returncode == 2
    assert "BASTION_REPLY_WINDOW_S is not valid" in bad.stderr and "Traceback" not in bad.stderr


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_written_config_runs_and_each_env_file_connects_as_its_service(
    tmp_path: Path,
) -> None:
    out, port = tmp_path / "nats", free_port()
    url = f"nats://127.0.0.1:{port}"
    done = nats_config(
        out, "--port", str(port), "--host", "127.0.0.1", "--store-dir", str(tmp_path / "js"),
        "--url", url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert mode(out) == 0o700
    files = {path.name for path in out.iterdir()}
    assert files == {"nats-server.conf", "auth.conf", *(f"{user}.env" for user in GRANTS)}
    assert all(mode(out / name) == 0o600 for name in files)
    sandbox = read_env_file(out / "sandbox.env")
    assert set(sandbox) == CONNECTION_VARIABLES
    assert sandbox["BASTION_NATS_USER"] == "sandbox"
    assert sandbox["BASTION_NATS_INBOX_PREFIX"] == "_INBOX.sandbox"
    assert sandbox["BASTION_NATS_URL"] == url
    assert f'store_dir: "{tmp_path / "js"}"' in (out / "nats-server.conf").read_text()

    errors: list[str] = []

    async def collect(error: Exception) -> None:
        errors.append(str(error).lower())

    with serving(out / "nats-server.conf", port):
        client = await nats.connect(
            url,
            user=sandbox["BASTION_NATS_USER"],
            password=sandbox["BASTION_NATS_PASSWORD"],
            inbox_prefix=sandbox["BASTION_NATS_INBOX_PREFIX"],
            error_cb=collect,
        )
        await client.subscribe("bastion.v1.vault.>")
        for _ in range(5):  # the -ERR may trail the first PONG: a few round trips settle it
            await client.flush()
        await client.close()
    assert any("permissions violation for subscription" in e for e in errors)


def test_each_run_makes_new_passwords_and_the_default_url_names_the_nats_host(
    tmp_path: Path,
) -> None:
    assert nats_config(tmp_path / "a").returncode == 0
    assert nats_config(tmp_path / "b", "--port", "4333").returncode == 0
    first = read_env_file(tmp_path / "a" / "vault.env")
    second = read_env_file(tmp_path / "b" / "vault.env")
    assert first["BASTION_NATS_PASSWORD"] != second["BASTION_NATS_PASSWORD"]
    assert first["BASTION_NATS_URL"] == "nats://nats:4222"
    assert second["BASTION_NATS_URL"] == "nats://nats:4333"
    server = (tmp_path / "a" / "nats-server.conf").read_text()
    assert 'listen: "0.0.0.0:4222"' in server
    assert 'store_dir: "/data/jetstream"' in server
    assert 'include "auth.conf"' in server


def test_commands_connect_as_the_operator_of_the_state_dir_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    assert nats_config(tmp_path / "state" / "nats").returncode == 0
    url = "nats://127.0.0.1:4999"
    found = find_bus_settings(url, tmp_path / "state", env={})
    assert (found.nats_url, found.nats_user) == (url, "operator")
    assert found.nats_inbox_prefix == "_INBOX.operator"
    given = find_bus_settings(
        url, tmp_path / "state", env={"BASTION_NATS_USER": "me", "BASTION_NATS_PASSWORD": "pw"}
    )
    assert (given.nats_user, given.nats_password, given.nats_inbox_prefix) == ("me", "pw", "_INBOX")
    nobody = find_bus_settings(url, tmp_path / "elsewhere", env={})
    assert nobody.nats_user is None
