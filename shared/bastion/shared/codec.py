"""Encoding of wire messages (msgpack on the bus) with one cached decoder per type."""

from __future__ import annotations

from functools import cache
from typing import Any

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


def describe_decode_error(error: msgspec.MsgspecError, message_type: Any) -> str:
    """A sentence for a payload that is not the expected message.

    msgspec's text names the field and the rule (`Expected int, got str - at $.limit`)
    but never echoes the value, so it is safe to send back.
    """
    name = getattr(message_type, "__name__", None) or str(message_type)
    detail = str(error).splitlines()[0][:300] if str(error) else "unreadable"
    return f"the request is not a valid {name}: {detail}"
