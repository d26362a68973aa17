"""Moving a local JetStream store from the one global account into Bastion's accounts.

Before NATS users had accounts, `bastion up` kept every stream in the global account
(`<store>/jetstream/$G/streams/`). A server with accounts looks for each account's streams
under `<store>/jetstream/<ACCOUNT>/streams/`, so a state dir from then would look empty:
sessions, approvals and secrets gone. `move_to_accounts` moves each stream's directory to
its account's while the server is stopped. A stream keeps no account name inside it.
"""

from __future__ import annotations

from pathlib import Path

from bastion.shared.natsperms import GRANTS, MAIN_ACCOUNT, account_of

__all__ = ["GLOBAL_ACCOUNT", "move_to_accounts"]

GLOBAL_ACCOUNT = "$G"


def _account_of_stream(stream: str) -> str:
    for user, grant in GRANTS.items():
        if stream.removeprefix("KV_") in grant.buckets and stream.startswith("KV_"):
            return account_of(user)
    return MAIN_ACCOUNT


def move_to_accounts(store_dir: Path) -> list[str]:
    """Move the global account's streams under `store_dir` to their accounts; the names of
    those moved. Run it only while no server uses `store_dir`. A stream already in its
    account is left where it is (and the old copy too)."""
    old = store_dir / "jetstream" / GLOBAL_ACCOUNT / "streams"
    if not old.is_dir():
        return []
    moved = []
    for stream in sorted(path for path in old.iterdir() if path.is_dir()):
        target = store_dir / "jetstream" / _account_of_stream(stream.name) / "streams"
        if (target / stream.name).exists():
            continue
        target.mkdir(parents=True, exist_ok=True)
        stream.rename(target / stream.name)
        moved.append(stream.name)
    return moved
