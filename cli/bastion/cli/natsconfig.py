"""`bastion nats config --out DIR`: a NATS server config and one nkey user per service.

It writes `DIR/nats-server.conf` (includes `DIR/auth.conf`, the users' public keys and
their permissions) and, for each of the six services, the hook runner (`hooks`) and the
operator's CLI (`operator`), `DIR/<user>.nk` (its seed, the secret) and `DIR/<user>.env`
(its URL, inbox prefix and where it finds its seed: `--seed-dir`, by default `DIR`). Each
serving user's reply window is `BASTION_REPLY_WINDOW_S` (default 120 s). See
docs/nats-permissions.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bastion.cli.common import add_verbs, fail
from bastion.shared.errors import InvalidInput
from bastion.shared.natsconfig import (
    AUTH_FILE,
    SERVER_FILE,
    ReplyWindow,
    seed_file_name,
    write_nats_config,
)
from bastion.shared.settings import load_settings

__all__ = ["add_parser"]


def run(args: argparse.Namespace) -> int:
    out: Path = args.out.expanduser()
    url = args.url or f"nats://nats:{args.port}"
    try:
        window = load_settings(ReplyWindow)
    except InvalidInput as error:
        return fail(error.message, 2)
    users = write_nats_config(
        out,
        listen=f"{args.host}:{args.port}",
        store_dir=args.store_dir,
        url=url,
        name=args.name,
        reply_window_s=window.reply_window_s,
        seed_dir=args.seed_dir,
    )
    sys.stdout.write(f"wrote {out / SERVER_FILE} and {out / AUTH_FILE} (0600)\n")
    for user in users:
        sys.stdout.write(f"wrote {out / seed_file_name(user)} and {out / f'{user}.env'} (0600)\n")
    sys.stdout.write(
        "each run makes new nkey seeds: restart NATS and every service with the new files\n"
    )
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "nats", help="the NATS server Bastion runs on: its config")
    command = verbs.add_parser(
        "config",
        help="write a NATS server config with one nkey user per service, and their seeds",
    )
    command.add_argument(
        "--out", type=Path, required=True, help="the directory to write to (made 0700)"
    )
    command.add_argument("--port", type=int, default=4222, help="the client port (default 4222)")
    command.add_argument(
        "--host", default="0.0.0.0", help="the address NATS listens on (default 0.0.0.0)"
    )
    command.add_argument(
        "--store-dir",
        default="/data/jetstream",
        help="JetStream's store directory (default /data/jetstream)",
    )
    command.add_argument(
        "--url",
        default="",
        help="the URL services connect to, written into each .env (default nats://nats:PORT)",
    )
    command.add_argument("--name", default="bastion", help="the server's name (default bastion)")
    command.add_argument(
        "--seed-dir",
        default="",
        help="where the services find their <user>.nk seed files, written into each .env "
        "(a container's mount point, e.g. /etc/bastion/nats; default the --out directory)",
    )
    command.set_defaults(handler=run)
