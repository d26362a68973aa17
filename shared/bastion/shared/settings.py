"""Typed settings, loaded once from environment variables and validated at construction.

Each service declares a frozen `msgspec.Struct` of its settings; `load_settings` fills it
from variables named `BASTION_<FIELD>` (upper case), converting strings to the field types.
"""

from __future__ import annotations

import os
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
    nats_user: str | None = None
    nats_password: str | None = None
    nats_inbox_prefix: str = "_INBOX"
    request_timeout_s: float = 10.0
    drain_timeout_s: float = 30.0


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
        path = str(error).rsplit("$.", 1)[-1] if "$." in str(error) else ""
        variable = ENV_PREFIX + path.upper() if path else "a BASTION_* variable"
        raise InvalidInput(f"{variable} is not valid: {str(error).split(' - at')[0]}") from None
