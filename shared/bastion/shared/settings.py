"""Typed settings, loaded once from environment variables and validated at construction.

Each service declares a frozen `msgspec.Struct` of its settings; `load_settings` fills it
from variables named `BASTION_<FIELD>` (upper case), converting strings to the field types.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from bastion.shared.errors import InvalidInput

__all__ = ["BusSettings", "load_settings"]

S = TypeVar("S", bound=msgspec.Struct)

ENV_PREFIX = "BASTION_"


class BusSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How a process reaches NATS. Every service's settings start with these fields."""

    nats_url: str = "nats://127.0.0.1:4222"
    nats_creds: str | None = None
    """A NATS `.creds` file (JWT and nkey seed), for a server run with decentralized auth."""
    nats_nkey_seed_file: str | None = None
    """The file holding this process's nkey user seed (`SU…`), which signs the server's
    challenge: how Bastion's services connect (`bastion nats config`, `bastion up`)."""
    nats_user: str | None = None
    """A user name, with `BASTION_NATS_PASSWORD`, for a server configured with passwords."""
    nats_password: str | None = None
    nats_inbox_prefix: str = "_INBOX"
    request_timeout_s: float = 10.0
    drain_timeout_s: float = 30.0
    probe_file: str = ""
    """Beaten while the service runs, saying whether it is on NATS, for container probes
    (`python -m bastion.shared.probe live` or `ready`)."""
    kv_replicas: int = 1
    """Copies of each KV bucket and stream the service creates: 3 on a three-node cluster."""


def load_settings(settings_type: type[S], env: Mapping[str, str] | None = None) -> S:
    """`settings_type` filled from `BASTION_*` variables of `env` (the process's by default).

    Raises:
        InvalidInput: a variable does not convert to its field's type; the sentence names it.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for field in msgspec.structs.fields(settings_type):
        variable = ENV_PREFIX + field.name.upper()
        if variable in env:
            values[field.name] = env[variable]
    try:
        return msgspec.convert(values, settings_type, strict=False)
    except msgspec.ValidationError as error:
        text = str(error)
        # msgspec says `... - at `$.request_timeout_s`` for a bad value and `Object missing
        # required field `name`` for an absent one: either way, name the variable to set.
        missing = _MISSING_FIELD.search(text)
        if missing:
            variable = ENV_PREFIX + missing.group(1).upper()
            raise InvalidInput(f"{variable} is required: set it in the environment") from None
        at = _AT_FIELD.search(text)
        variable = ENV_PREFIX + at.group(1).upper() if at else "a BASTION_* variable"
        rule = text.split(" - at ", maxsplit=1)[0]
        raise InvalidInput(f"{variable} is not valid: {rule}") from None


_AT_FIELD = re.compile(r" - at `\$\.([A-Za-z_][A-Za-z0-9_]*)")
_MISSING_FIELD = re.compile(r"missing required field `([A-Za-z_][A-Za-z0-9_]*)`")
