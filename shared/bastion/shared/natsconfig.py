"""A NATS server config with one nkey user per service, and each service's connection files.

`write_nats_config(directory, ...)` writes, all 0600 in a 0700 directory:

- `nats-server.conf`: listen address, JetStream store, and `include "auth.conf"`;
- `auth.conf`: the accounts, their users by nkey *public* key with their permissions
  (`natsperms.GRANTS`) and the exports and imports between them, to include from any
  other server config (a cluster's, say): it holds nothing that lets anyone connect;
- `<user>.nk`: the user's nkey seed, the one secret, which the service signs the server's
  challenge with (`BASTION_NATS_NKEY_SEED_FILE`; mounted as a file, never an env value);
- `<user>.env`: `BASTION_NATS_URL`, `BASTION_NATS_NKEY_SEED_FILE` (the seed's path as the
  service sees it: `seed_dir`, by default `directory`), `BASTION_NATS_INBOX_PREFIX`, one
  `NAME=value` a line (what `docker compose` `env_file` and a kustomize generator read):
  no secret in it. The vault's also names each nkey's user (`BASTION_VAULT_CALLER_NKEYS`),
  since the server stamps requests with the caller's public key.

Seeds are random (32 bytes, an nkey user seed `SU…`): new ones each time it is written.

A user that serves may answer each request it received once, within the reply window
(`BASTION_REPLY_WINDOW_S`, `ReplyWindow`; the server's `allow_responses.expires`). Bastion's
own callers do not depend on it: they are answered on a subject of their own
(`bastion.proto.subjects.reply_subject`), whenever the answer comes; the window bounds only
answers sent to a request's reply subject (discovery, the vault across accounts, clients
that do not ask for a reply subject).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import msgspec

from bastion.shared.errors import InvalidInput
from bastion.shared.natsperms import (
    GRANTS,
    OPERATOR,
    Crossing,
    accounts,
    crossings,
    inbox_prefix,
    permissions,
)
from bastion.shared.nkeyseeds import new_user_seed, public_key

__all__ = [
    "AUTH_FILE",
    "DEFAULT_REPLY_WINDOW_S",
    "SERVER_FILE",
    "VAULT_CALLER_NKEYS",
    "ReplyWindow",
    "UserCredentials",
    "auth_config",
    "env_file",
    "read_env_file",
    "seed_file_name",
    "server_config",
    "service_env",
    "write_nats_config",
]

SERVER_FILE = "nats-server.conf"
AUTH_FILE = "auth.conf"
DEFAULT_REPLY_WINDOW_S = 120.0


class ReplyWindow(msgspec.Struct, frozen=True, kw_only=True):
    """`BASTION_REPLY_WINDOW_S`: how long after a request its server may still answer on the
    request's reply subject (written into the config as `allow_responses.expires`)."""

    reply_window_s: Annotated[float, msgspec.Meta(gt=0, le=7 * 86400)] = DEFAULT_REPLY_WINDOW_S


def seed_file_name(user: str) -> str:
    """The name of `user`'s seed file in the directory `write_nats_config` writes."""
    return f"{user}.nk"


@dataclass(frozen=True)
class UserCredentials:
    """How one user connects: its name (which its inbox prefix and reply subjects carry),
    its nkey seed, and the path its service reads that seed from."""

    user: str
    seed: str = field(repr=False)
    seed_file: str

    @property
    def public_key(self) -> str:
        """The nkey (`U…`) the server's config lists for this user."""
        return public_key(self.seed)

    @property
    def inbox_prefix(self) -> str:
        return inbox_prefix(self.user)

    def env(self, url: str) -> dict[str, str]:
        """The variables `BusSettings` reads to connect as this user to `url`."""
        return {
            "BASTION_NATS_URL": url,
            "BASTION_NATS_NKEY_SEED_FILE": self.seed_file,
            "BASTION_NATS_INBOX_PREFIX": self.inbox_prefix,
        }


VAULT_CALLER_NKEYS = "BASTION_VAULT_CALLER_NKEYS"
"""The vault's variable naming each nkey's user: the server stamps a request across accounts
with the caller's public key, and the vault's rules (and audit log) name users."""


def service_env(users: Mapping[str, UserCredentials], user: str, url: str) -> dict[str, str]:
    """What `user`'s process is given to connect to `url` (its env file's variables): its
    credentials', and for the vault which nkey is which user."""
    variables = users[user].env(url)
    if user == "vault":
        names = ",".join(f"{c.public_key}={name}" for name, c in users.items())
        variables[VAULT_CALLER_NKEYS] = names
    return variables


def _quoted(items: Iterable[str]) -> str:
    # JSON strings are NATS config strings; quoted, a `$` is not a variable reference.
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def _allow(subjects: tuple[str, ...]) -> str:
    return f"{{ allow: {_quoted(subjects)} }}" if subjects else '{ deny: [">"] }'


def _duration(seconds: float) -> str:
    """A NATS config duration, in whole milliseconds (`0` would mean the server's default)."""
    return f"{max(1, round(seconds * 1000))}ms"


def _user(credentials: UserCredentials, reply_window_s: float) -> list[str]:
    allowed = permissions(credentials.user)
    lines = [
        "      {",
        f"        # {credentials.user}",
        f"        nkey: {json.dumps(credentials.public_key)}",
        "        permissions: {",
        # An empty allow list would allow everything: nothing allowed is a deny of all.
        f"          publish: {_allow(allowed.publish)}",
        f"          subscribe: {_allow(allowed.subscribe)}",
    ]
    if allowed.allow_responses:
        # One reply per request on its reply subject, within the window ("0s" is not "no
        # limit" but the server's default, two minutes). Answers that may come later go to
        # the caller's own reply subject, which the publish list above allows.
        window = json.dumps(_duration(reply_window_s))
        lines.append(f"          allow_responses: {{ max: 1, expires: {window} }}")
    return [*lines, "        }", "      }"]


def _export(crossing: Crossing) -> str:
    kind = ', response_type: "stream"' if crossing.many_replies else ""
    return (
        f"      {{ service: {json.dumps(crossing.subject)}, "
        f"accounts: [{json.dumps(crossing.importer)}]{kind} }}"
    )


def _import(crossing: Crossing) -> str:
    share = ", share: true" if crossing.share else ""
    return (
        f"      {{ service: {{ account: {json.dumps(crossing.exporter)}, "
        f"subject: {json.dumps(crossing.subject)} }}{share} }}"
    )


def auth_config(
    credentials: Mapping[str, UserCredentials], reply_window_s: float = DEFAULT_REPLY_WINDOW_S
) -> str:
    """The `accounts` block: every user with exactly its permissions, in its account, and
    the exports and imports between accounts."""
    lines = ["# Generated by `bastion nats config`: one user per Bastion service.", ""]
    lines.append("accounts {")
    for account, users in accounts().items():
        lines += [f"  {account} {{", "    jetstream: enabled", "    users: ["]
        for user in users:
            lines += _user(credentials[user], reply_window_s)
        lines.append("    ]")
        exports = [_export(c) for c in crossings() if c.exporter == account]
        imports = [_import(c) for c in crossings() if c.importer == account]
        for name, items in (("exports", exports), ("imports", imports)):
            if items:
                lines += [f"    {name}: [", *items, "    ]"]
        lines.append("  }")
    lines += ["}", ""]
    return "\n".join(lines)


def server_config(listen: str, store_dir: str, name: str = "bastion") -> str:
    """A whole server config that includes `auth.conf` from its own directory."""
    return (
        "# Generated by `bastion nats config`.\n"
        f"server_name: {json.dumps(name)}\n"
        f"listen: {json.dumps(listen)}\n"
        "max_payload: 8MB\n"
        f"jetstream {{ store_dir: {json.dumps(store_dir)} }}\n"
        f"include {json.dumps(AUTH_FILE)}\n"
    )


def env_file(variables: Mapping[str, str]) -> str:
    return "".join(f"{name}={value}\n" for name, value in variables.items())


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    path.chmod(0o600)  # an existing file keeps its mode through O_CREAT


def write_nats_config(
    directory: Path,
    *,
    listen: str,
    store_dir: str,
    url: str,
    name: str = "bastion",
    reply_window_s: float = DEFAULT_REPLY_WINDOW_S,
    seed_dir: str = "",
) -> dict[str, UserCredentials]:
    """The server config, the users' include file, and per user a new nkey seed and an env
    file naming it as `<seed_dir>/<user>.nk` (`seed_dir`: where the services find the seeds;
    `directory` itself by default, and always for the operator, whose CLI runs beside the
    files), in `directory`; returns each user's credentials."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    here = str(directory.resolve())
    # The operator's CLI runs where the files are, not in a container.
    seeds_at = {user: seed_dir.rstrip("/") or here for user in GRANTS} | {OPERATOR: here}
    users = {
        user: UserCredentials(
            user=user, seed=new_user_seed(), seed_file=f"{seeds_at[user]}/{seed_file_name(user)}"
        )
        for user in GRANTS
    }
    _write_private(directory / AUTH_FILE, auth_config(users, reply_window_s))
    _write_private(directory / SERVER_FILE, server_config(listen, store_dir, name))
    for user, credentials in users.items():
        _write_private(directory / seed_file_name(user), f"{credentials.seed}\n")
        _write_private(directory / f"{user}.env", env_file(service_env(users, user, url)))
    return users


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of an env file written here (`NAME=value` lines; `#` comments).

    Raises:
        InvalidInput: a line is not `NAME=value`.
    """
    variables: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise InvalidInput(
                f"{path}:{number} is not a NAME=value line: regenerate the file with "
                "`bastion nats config`"
            )
        variables[name.strip()] = value
    return variables
