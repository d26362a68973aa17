"""The files `bastion nats-config` writes, made by hand while it is not in this checkout.

Issue 7 item 3 brings the command; until it lands here the deployment tests still check
compose and the overlays against the layout it writes (`nats-server.conf` including
`auth.conf`, one `<user>.env` each), with one unauthenticated user for all. Delete this
module when `bastion nats-config` is in the tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["has_nats_config", "nats_config_by_hand"]

USERS = ("orchestrator", "policy", "sandbox", "egress", "mcp", "vault", "hooks", "operator")


def has_nats_config() -> bool:
    probe = [sys.executable, "-m", "bastion.cli", "nats-config", "--help"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def nats_config_by_hand(directory: Path, url: str) -> None:
    directory.mkdir(parents=True, mode=0o700)
    (directory / "nats-server.conf").write_text(
        'server_name: "bastion"\nlisten: "0.0.0.0:4222"\nmax_payload: 8MB\n'
        'jetstream { store_dir: "/data/jetstream" }\ninclude "auth.conf"\n'
    )
    (directory / "auth.conf").write_text("# no users: bastion nats-config writes them\n")
    for user in USERS:
        (directory / f"{user}.env").write_text(f"BASTION_NATS_URL={url}\n")
    for path in directory.iterdir():
        path.chmod(0o600)
