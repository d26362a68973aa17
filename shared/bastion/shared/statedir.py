"""Where a local Bastion keeps its state, and how every command finds a running one.

The state directory is `--state-dir`, else `BASTION_STATE_DIR`, else
`$XDG_STATE_HOME/bastion` (`~/.local/state/bastion`). `bastion up` writes `run/up.json`
there with the NATS URL it serves; other commands read it unless given `--nats URL` /
`BASTION_NATS_URL`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from bastion.shared.errors import Unavailable

__all__ = ["RunRecord", "default_state_dir", "find_nats_url", "read_run_record", "run_record_path"]


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What `bastion up` tells other commands about the system it runs."""

    nats_url: str
    pid: int
    started_at: str


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("BASTION_STATE_DIR"):
        return Path(env["BASTION_STATE_DIR"]).expanduser().resolve()
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return (Path(base).expanduser() / "bastion").resolve()


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
