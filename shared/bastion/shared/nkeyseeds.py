"""nkey user seeds: a new one, the public key of one, and a seed file checked before use.

A NATS nkey user is an Ed25519 key pair: the server's config lists the public key (`U…`),
the client keeps the seed (`SU…`) and signs the server's challenge with it, so the server
holds nothing that lets anyone connect (`bastion.shared.natsconfig` writes them,
`bastion.shared.bus.connect` connects with a seed file).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import nkeys

from bastion.shared.errors import InvalidInput

__all__ = ["check_seed_file", "new_user_seed", "public_key"]


def new_user_seed() -> str:
    """A new, random nkey user seed (`SU…`)."""
    return str(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER).decode())


def public_key(seed: str) -> str:
    """The public key (`U…`) of the nkey `seed`.

    Raises:
        InvalidInput: `seed` is not an nkey seed.
    """
    try:
        pair = nkeys.from_seed(bytearray(seed.strip().encode()))
    except (nkeys.NkeysError, ValueError):
        raise InvalidInput("that is not an nkey seed (one `SU…` line)") from None
    try:
        return str(pair.public_key.decode())
    finally:
        pair.wipe()


def check_seed_file(path: str) -> None:
    """Raises InvalidInput, saying what to do, when `path` does not hold an nkey user seed."""
    try:
        seed = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not text"
        raise InvalidInput(
            f"BASTION_NATS_NKEY_SEED_FILE={path} cannot be read ({reason}): mount the "
            "service's seed file there (`bastion nats config` writes `<user>.nk`)"
        ) from None
    try:
        public_key(seed)
    except InvalidInput:
        raise InvalidInput(
            f"BASTION_NATS_NKEY_SEED_FILE={path} does not hold an nkey seed (one `SU…` line): "
            "give the `<user>.nk` file `bastion nats config` wrote"
        ) from None
