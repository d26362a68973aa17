"""`bastion secret add|list|remove|rotate-key`: the vault's secrets, through the bus.

A value is read without echo (a terminal), from stdin, or from an environment variable,
and sealed to the vault's key before it leaves this process: no one on the bus sees it.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

import anyio

from bastion.cli.common import (
    Asker,
    add_location_options,
    add_output_option,
    add_verbs,
    bus,
    fail,
    write_items,
)
from bastion.proto import subjects
from bastion.proto.vault import (
    AddSecret,
    KeyRotated,
    ListSecrets,
    RemoveSecret,
    RotateKey,
    SecretAdded,
    SecretList,
    SecretRemoved,
    VaultKey,
    VaultKeyQuery,
)
from bastion.shared.bus import Client, request
from bastion.shared.errors import InvalidInput
from bastion.shared.keyfiles import decode_key, read_owner_only
from bastion.shared.sealing import seal
from bastion.shared.secretnames import check_name, check_value

__all__ = ["add_parser", "read_value"]

TIMEOUT_S = 30.0


_ask = Asker("bastion-secret", TIMEOUT_S)


def read_value(name: str, from_env: str | None) -> bytes:
    """The value to keep: from `from_env`, typed without echo at a terminal, or piped in
    (one final line break dropped, as `echo` adds it)."""
    if from_env:
        if from_env not in os.environ:
            raise InvalidInput(f"the environment variable {from_env} is not set")
        return os.environ[from_env].encode()
    if sys.stdin.isatty():
        return getpass.getpass(f"value of {name} (not shown): ").encode()
    data = sys.stdin.buffer.read()
    for ending in (b"\r\n", b"\n"):
        if data.endswith(ending):
            return data[: -len(ending)]
    return data


async def _sealed_for_vault(client: Client, plaintext: bytes, context: bytes) -> bytes:
    key: VaultKey = await request(
        client, subjects.VAULT_KEY, VaultKeyQuery(), VaultKey, timeout_s=TIMEOUT_S
    )
    return seal(key.public_key, plaintext, context)


def add(args: argparse.Namespace) -> int:
    name = check_name(args.name)
    value = read_value(name, args.from_env)
    check_value(name, value)

    async def send() -> SecretAdded:
        async with bus(args, "bastion-secret") as client:
            sealed = await _sealed_for_vault(client, value, f"add {args.tenant} {name}".encode())
            added: SecretAdded = await request(
                client,
                subjects.VAULT_ADD,
                AddSecret(tenant=args.tenant, name=name, sealed_value=sealed),
                SecretAdded,
                timeout_s=TIMEOUT_S,
            )
            return added

    added = anyio.run(send)
    replaced = ", replacing the value kept before" if added.replaced else ""
    sys.stdout.write(f"added secret {added.name} ({added.size} bytes){replaced}\n")
    return 0


def list_secrets(args: argparse.Namespace) -> int:
    found = _ask(args, subjects.VAULT_LIST, ListSecrets(tenant=args.tenant), SecretList)
    if args.output == "json":
        write_items(found.secrets, tenant=found.tenant)
        return 0
    if not found.secrets:
        sys.stdout.write(f"tenant {found.tenant} has no secrets\n")
    for info in found.secrets:
        sys.stdout.write(f"{info.name}  added {info.added_at:%Y-%m-%dT%H:%M:%SZ}\n")
    return 0


def remove(args: argparse.Namespace) -> int:
    gone = RemoveSecret(tenant=args.tenant, name=args.name)
    removed = _ask(args, subjects.VAULT_REMOVE, gone, SecretRemoved)
    sys.stdout.write(f"removed secret {removed.name}\n")
    return 0


def rotate_key(args: argparse.Namespace) -> int:
    path: Path = args.new_key_file
    try:
        key = decode_key(read_owner_only(path))
    except PermissionError as exposed:
        return fail(f"the new key at {path} may be read by others ({exposed}): chmod 600 {path}")
    except OSError as error:
        return fail(f"cannot read the new key at {path}: {error.strerror}")
    if key is None:
        return fail(
            f"the new key at {path} is not 32 bytes, raw or base64: make one with "
            "`head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`"
        )

    async def send() -> KeyRotated:
        async with bus(args, "bastion-secret") as client:
            sealed = await _sealed_for_vault(client, key, b"rotate")
            rotated: KeyRotated = await request(
                client, subjects.VAULT_ROTATE, RotateKey(sealed_key=sealed), KeyRotated,
                timeout_s=120,
            )  # fmt: skip
            return rotated

    rotated = anyio.run(send)
    sys.stdout.write(
        f"re-wrapped {rotated.tenants} tenants' data keys under master key {rotated.key_id}\n"
    )
    if rotated.key_file_updated:
        sys.stdout.write("the vault's master key file now holds the new key\n")
    else:
        sys.stdout.write(
            "now give every vault instance the new key (BASTION_VAULT_MASTER_KEY_FILE or "
            "the Secret it mounts) and restart them; the old key opens nothing any more\n"
        )
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(
        commands, "secret", help="secrets that skills' scripts and upstream MCP servers may receive"
    )

    adding = verbs.add_parser("add", help="keep a secret (value from stdin or --from-env)")
    adding.add_argument("name", help="an environment variable's name, e.g. PYPI_TOKEN")
    adding.add_argument("--from-env", metavar="VAR", help="take the value from this variable")
    adding.set_defaults(handler=add)

    listing = verbs.add_parser("list", help="the secrets' names and when each was added")
    add_output_option(listing)
    listing.set_defaults(handler=list_secrets)

    removing = verbs.add_parser("remove", help="forget a secret")
    removing.add_argument("name")
    removing.set_defaults(handler=remove)

    rotating = verbs.add_parser(
        "rotate-key", help="re-wrap every tenant's data key under a new master key"
    )
    rotating.add_argument("--new-key-file", type=Path, required=True, metavar="FILE")
    rotating.set_defaults(handler=rotate_key)

    for verb in (adding, listing, removing):
        verb.add_argument("--tenant", default="default", help="whose secret (default: default)")
    for verb in (adding, listing, removing, rotating):
        add_location_options(verb)
