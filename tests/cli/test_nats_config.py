"""`bastion nats config` writes a config nats-server runs, listing each service's nkey, and the
seed and env files services connect with."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import nats
import pytest

from bastion.cli.natsserver import free_port, serving
from bastion.shared.bus import CredentialsRefused, connect, round_trip
from bastion.shared.errors import InvalidInput
from bastion.shared.natsconfig import read_env_file
from bastion.shared.natsperms import GRANTS
from bastion.shared.nkeyseeds import new_user_seed, public_key
from bastion.shared.settings import BusSettings, load_settings
from bastion.shared.statedir import find_bus_settings

pytestmark = pytest.mark.anyio

CONNECTION_VARIABLES = {
    "BASTION_NATS_URL",
    "BASTION_NATS_NKEY_SEED_FILE",
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
    assert files == {
        "nats-server.conf",
        "auth.conf",
        *(f"{user}.env" for user in GRANTS),
        *(f"{user}.nk" for user in GRANTS),
    }
    assert all(mode(out / name) == 0o600 for name in files)
    sandbox = read_env_file(out / "sandbox.env")
    assert set(sandbox) == CONNECTION_VARIABLES
    assert sandbox["BASTION_NATS_NKEY_SEED_FILE"] == str(out / "sandbox.nk")
    assert sandbox["BASTION_NATS_INBOX_PREFIX"] == "_INBOX.sandbox"
    # The server lists public keys only: no seed, and no password, is in its config.
    auth = (out / "auth.conf").read_text()
    for user in GRANTS:
        seed = (out / f"{user}.nk").read_text().strip()
        assert seed.startswith("SU") and seed not in auth
        assert f'nkey: "{public_key(seed)}"' in auth
    assert "password" not in auth
    assert sandbox["BASTION_NATS_URL"] == url
    assert f'store_dir: "{tmp_path / "js"}"' in (out / "nats-server.conf").read_text()

    errors: list[str] = []

    async def collect(error: Exception) -> None:
        errors.append(str(error).lower())

    with serving(out / "nats-server.conf", port):
        client = await nats.connect(
            url,
            nkeys_seed=sandbox["BASTION_NATS_NKEY_SEED_FILE"],
            inbox_prefix=sandbox["BASTION_NATS_INBOX_PREFIX"],
            error_cb=collect,
        )
        await client.subscribe("bastion.v1.vault.>")
        await round_trip(client)  # the SUB's -ERR comes before this round trip's PONG
        await client.close()
    assert any("permissions violation for subscription" in e for e in errors)


def test_each_run_makes_new_seeds_and_the_default_url_names_the_nats_host(
    tmp_path: Path,
) -> None:
    assert nats_config(tmp_path / "a").returncode == 0
    assert nats_config(tmp_path / "b", "--port", "4333").returncode == 0
    first = read_env_file(tmp_path / "a" / "vault.env")
    second = read_env_file(tmp_path / "b" / "vault.env")
    assert (tmp_path / "a" / "vault.nk").read_text() != (tmp_path / "b" / "vault.nk").read_text()
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
    operator_seed = str(tmp_path / "state" / "nats" / "operator.nk")
    assert (found.nats_url, found.nats_nkey_seed_file) == (url, operator_seed)
    assert found.nats_inbox_prefix == "_INBOX.operator"
    given = find_bus_settings(
        url, tmp_path / "state", env={"BASTION_NATS_USER": "me", "BASTION_NATS_PASSWORD": "pw"}
    )
    assert (given.nats_user, given.nats_password, given.nats_inbox_prefix) == ("me", "pw", "_INBOX")
    mine = find_bus_settings(
        url, tmp_path / "state", env={"BASTION_NATS_NKEY_SEED_FILE": "/run/me.nk"}
    )
    assert (mine.nats_nkey_seed_file, mine.nats_inbox_prefix) == ("/run/me.nk", "_INBOX")
    nobody = find_bus_settings(url, tmp_path / "elsewhere", env={})
    assert nobody.nats_user is None and nobody.nats_nkey_seed_file is None


def test_the_env_files_name_the_seeds_where_the_containers_mount_them(tmp_path: Path) -> None:
    done = nats_config(tmp_path / "nats", "--seed-dir", "/etc/bastion/nats")
    assert done.returncode == 0, done.stderr
    policy = read_env_file(tmp_path / "nats" / "policy.env")
    assert policy["BASTION_NATS_NKEY_SEED_FILE"] == "/etc/bastion/nats/policy.nk"
    # The operator's CLI runs beside the files, not in a container.
    operator = read_env_file(tmp_path / "nats" / "operator.env")
    assert operator["BASTION_NATS_NKEY_SEED_FILE"] == str(tmp_path / "nats" / "operator.nk")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    """A server run from `bastion nats config`'s files: their directory."""
    out, port = tmp_path / "nats", free_port()
    done = nats_config(
        out, "--port", str(port), "--host", "127.0.0.1", "--store-dir", str(tmp_path / "js"),
        "--url", f"nats://127.0.0.1:{port}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with serving(out / "nats-server.conf", port):
        yield out


async def test_a_service_connects_with_its_seed_file_and_a_wrong_seed_is_refused_saying_so(
    served: Path, tmp_path: Path
) -> None:
    out = served
    policy = load_settings(BusSettings, read_env_file(out / "policy.env"))
    async with connect(policy, "policy") as client:
        await client.flush()
        assert client.is_connected
    stranger = tmp_path / "stranger.nk"
    stranger.write_text(new_user_seed())
    with pytest.raises(CredentialsRefused) as refused:
        async with connect(
            msgspec.structs.replace(policy, nats_nkey_seed_file=str(stranger)), "policy"
        ):
            pass
    assert f"refused this process's credentials ({stranger})" in refused.value.message
    assert "bastion nats config" in refused.value.message


@pytest.mark.parametrize(
    ("content", "said"), [(None, "cannot be read"), ("not a seed", "does not hold an nkey seed")]
)
async def test_a_seed_file_missing_or_not_a_seed_is_refused_before_connecting(
    tmp_path: Path, content: str | None, said: str
) -> None:
    path = tmp_path / "policy.nk"
    if content is not None:
        path.write_text(content)
    settings = BusSettings(nats_url="nats://127.0.0.1:1", nats_nkey_seed_file=str(path))
    with pytest.raises(InvalidInput) as refused:
        async with connect(settings, "policy"):
            pass
    assert f"BASTION_NATS_NKEY_SEED_FILE={path}" in refused.value.message
    assert said in refused.value.message
