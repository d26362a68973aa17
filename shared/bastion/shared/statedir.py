"""Where a local Bastion keeps its state, and how every command finds a running one.

The state directory is `--state-dir`, else `BASTION_STATE_DIR`, else
`$XDG_STATE_HOME/bastion` (`~/.local/state/bastion`). `bastion up` writes `run/up.json`
there with the NATS URL it serves, and `nats/operator.env` naming the operator's NATS nkey
seed (`nats/operator.nk`); other commands read them unless given `--nats URL` /
`BASTION_NATS_URL` and credentials of their own (`BASTION_NATS_NKEY_SEED_FILE`,
`BASTION_NATS_CREDS`, or `BASTION_NATS_USER` / `BASTION_NATS_PASSWORD`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from bastion.shared.errors import Unavailable
from bastion.shared.natsconfig import read_env_file
from bastion.shared.settings import BusSettings, load_settings

__all__ = [
    "RunRecord",
    "default_state_dir",
    "find_bus_settings",
    "find_nats_url",
    "nats_dir",
    "read_run_record",
    "run_record_path",
]


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What `bastion up` tells other commands about the system it runs."""

    nats_url: str
    pid: int
    started_at: str
    children: dict[str, int] = {}
    """The pid of each child (`orchestrator`, or `orchestrator.1` … with replicas) now."""


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("BASTION_STATE_DIR"):
        return Path(env["BASTION_STATE_DIR"]).expanduser().resolve()
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return (Path(base).expanduser() / "bastion").resolve()


def nats_dir(state_dir: Path) -> Path:
    """Where `bastion up` keeps NATS's config, its users' env files and JetStream's data."""
    return state_dir / "nats"


def run_record_path(state_dir: Path) -> Path:
    return state_dir / "run" / "up.json"


def read_run_record(state_dir: Path) -> RunRecord | None:
    """The record of a `bastion up` whose process is still alive, or None."""
    try:
        record = msgspec.json.decode(run_record_path(state_dir).read_bytes(), type=RunRecord)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return record


def find_nats_url(
    nats_url: str | None, state_dir: Path, env: Mapping[str, str] | None = None
) -> str:
    """The NATS URL to use: the one given, else `BASTION_NATS_URL`, else the state dir's.

    Raises:
        Unavailable: none is given and no `bastion up` runs on `state_dir`.
    """
    env = os.environ if env is None else env
    if nats_url:
        return nats_url
    if env.get("BASTION_NATS_URL"):
        return env["BASTION_NATS_URL"]
    record = read_run_record(state_dir)
    if record is None:
        raise Unavailable(
            f"no running Bastion found for state dir {state_dir}: start one with `bastion up`, "
            "or give --nats URL (BASTION_NATS_URL)"
        )
    return record.nats_url


_CREDENTIALS = {"BASTION_NATS_NKEY_SEED_FILE", "BASTION_NATS_CREDS", "BASTION_NATS_USER"}


def find_bus_settings(
    nats_url: str | None, state_dir: Path, env: Mapping[str, str] | None = None
) -> BusSettings:
    """How the operator's commands connect: the URL as `find_nats_url` finds it, as the
    credentials the environment gives (a seed file, a creds file, a user), else those of the
    state dir's `nats/operator.env`
    (written by `bastion up`), else as nobody in particular (a server without users).

    Raises:
        Unavailable: no URL is given and no `bastion up` runs on `state_dir`.
        InvalidInput: a variable or the operator's env file is malformed.
    """
    env = os.environ if env is None else env
    url = find_nats_url(nats_url, state_dir, env)
    variables = {k: v for k, v in env.items() if k.startswith("BASTION_NATS_")}
    operator = nats_dir(state_dir) / "operator.env"
    if not _CREDENTIALS & set(variables) and operator.exists():
        variables.update(read_env_file(operator))
    variables["BASTION_NATS_URL"] = url
    return load_settings(BusSettings, variables)
