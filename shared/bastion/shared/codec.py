"""Encoding of wire messages (msgpack on the bus) with one cached decoder per type."""

from __future__ import annotations

import re
from functools import cache
from typing import Any, get_args

import msgspec

from bastion.shared.errors import BadRequest

__all__ = ["decode", "describe_decode_error", "encode"]

_encoder = msgspec.msgpack.Encoder()


def encode(message: object) -> bytes:
    """A message as the bytes that travel on the bus."""
    return _encoder.encode(message)


@cache
def _decoder(message_type: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(message_type)


def decode(data: bytes, message_type: Any) -> Any:
    """Bytes from the bus as `message_type` (a struct or a union), or `BadRequest` saying why."""
    try:
        return _decoder(message_type).decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise BadRequest(describe_decode_error(error, message_type)) from None


# msgspec's text is a rule and a path (`Expected `int`, got `str` - at `$.limit``), but
# some rules quote what was sent: an enum or tag value, an unknown field's name, a
# malformed byte. The sentence travels to the caller, into the `Nats-Service-Error` header
# and into `$SRV.STATS`, so those rules are replaced by their first words.
_ECHOING_RULES = (
    ("Invalid enum value", "Invalid value"),
    ("Invalid value", "Invalid value"),
    ("Object contains unknown field", "Object contains a field the message does not have"),
    ("MessagePack data is malformed", "MessagePack data is malformed"),
    ("JSON is malformed", "JSON is malformed"),
)
_PATH = re.compile(r" - at `(\$(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\]|\[\.\.\.\])*)`$")


def describe_decode_error(error: msgspec.MsgspecError, message_type: Any) -> str:
    """A sentence for a payload that is not the expected message, echoing none of it.

    It names the field (its path in the schema) and the rule broken, never a value sent.
    """
    members = get_args(message_type) or (message_type,)
    name = " or ".join(getattr(member, "__name__", str(member)) for member in members)
    text = str(error).splitlines()[0] if str(error) else "unreadable"
    path = _PATH.search(text)
    rule = text[: path.start()] if path else text
    for echoing, safe in _ECHOING_RULES:
        if rule.startswith(echoing):
            rule = safe
            break
    where = f" - at `{path.group(1)}`" if path else ""
    return f"the request is not a valid {name}: {rule[:300]}{where}"
