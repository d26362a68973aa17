"""Encoding of wire messages (msgpack on the bus) with one cached decoder per type.

Decoding is where untrusted bytes become objects, so it also bounds their nesting: a
field typed as arbitrary JSON (a tool's input, an MCP call's arguments) could otherwise
hold an array nested thousands deep, which overflows the decoder's recursion (or a later
encoder's, or a policy engine's) and would end as an internal error instead of a
`bad_request` the caller can act on.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Final, get_args

import msgspec
import msgspec.inspect

from bastion.proto._base import NAME_PATTERN, PATH_PATTERN, SESSION_ID_PATTERN
from bastion.proto.toolinput import TASK_ID_PATTERN
from bastion.shared.errors import BadRequest

__all__ = ["MAX_NESTING", "decode", "describe_decode_error", "encode"]

_encoder = msgspec.msgpack.Encoder()

MAX_NESTING: Final = 64
"""The deepest a decoded message may nest (arrays, maps and messages in one another)."""


def encode(message: object) -> bytes:
    """A message as the bytes that travel on the bus."""
    return _encoder.encode(message)


@cache
def _decoder(message_type: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(message_type)


def decode(data: bytes, message_type: Any) -> Any:
    """Bytes from the bus as `message_type` (a struct or a union), or `BadRequest` saying why."""
    try:
        message = _decoder(message_type).decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise BadRequest(describe_decode_error(error, message_type)) from None
    except RecursionError:
        # Deeper than the interpreter's stack, so deeper than the bound too.
        raise BadRequest(_too_deep(message_type)) from None
    if (
        len(data) > MAX_NESTING
        and _nests_freely(message_type)
        and _deeper_than(message, MAX_NESTING)
    ):
        raise BadRequest(_too_deep(message_type))
    return message


_SEQUENCES = (
    msgspec.inspect.ListType,
    msgspec.inspect.VarTupleType,
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
)


@cache
def _nests_freely(message_type: Any) -> bool:
    """Whether a `message_type` may nest deeper than the bound: it holds arbitrary data
    somewhere (a field typed `Any`), or holds itself, or its schema is that deep. Only
    such a message is walked after decoding."""
    depth = _schema_depth(msgspec.inspect.type_info(message_type), ())
    return depth is None or depth >= MAX_NESTING


def _schema_depth(info: msgspec.inspect.Type, within: tuple[type, ...]) -> int | None:
    """How deep containers nest in values of `info`, or None if without bound."""
    if isinstance(info, msgspec.inspect.AnyType):
        return None
    if isinstance(info, msgspec.inspect.StructType | msgspec.inspect.DataclassType):
        if info.cls in within:
            return None
        inner = [_schema_depth(f.type, (*within, info.cls)) for f in info.fields]
    elif isinstance(info, msgspec.inspect.UnionType):
        inner = [_schema_depth(member, within) for member in info.types]
        return None if None in inner else max(inner, default=0)  # type: ignore[type-var]
    elif isinstance(info, msgspec.inspect.DictType):
        inner = [_schema_depth(info.key_type, within), _schema_depth(info.value_type, within)]
    elif isinstance(info, msgspec.inspect.TupleType):
        inner = [_schema_depth(item, within) for item in info.item_types]
    elif isinstance(info, _SEQUENCES):
        inner = [_schema_depth(info.item_type, within)]
    else:
        return 0
    return None if None in inner else 1 + max(inner, default=0)  # type: ignore[type-var,operator]


def _too_deep(message_type: Any) -> str:
    return (
        f"the request is not a valid {_names(message_type)}: it is nested more than "
        f"{MAX_NESTING} deep (arrays and maps within one another); send flatter data"
    )


def _children(value: object) -> list[object]:
    """The values directly inside `value`: a map's keys and values, a sequence's items, a
    message's fields; none for a scalar."""
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    if isinstance(value, msgspec.Struct):
        return [getattr(value, name) for name in value.__struct_fields__]
    return []


def _deeper_than(value: object, limit: int) -> bool:
    """Whether `value` nests containers more than `limit` deep (walked without recursion)."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        inside = _children(item)
        if inside and depth >= limit:
            return True
        pending.extend((child, depth + 1) for child in inside)
    return False


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
_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `([A-Za-z_][A-Za-z0-9_]{0,39})`")
"""An unknown field msgspec names: echoed when it is a short plain name, never otherwise."""
_PATTERN_RULE = re.compile(r"^Expected `str` matching regex '(.*)'$")
_PATTERN_WORDS: Final = {
    PATH_PATTERN: "Expected a path without a NUL character (no file name holds one)",
    SESSION_ID_PATTERN: "Expected a session id (16 lowercase hex digits)",
    NAME_PATTERN: "Expected a name (letters, digits, `_`, `.` and `-`, starting with a "
    "letter or a digit)",
    TASK_ID_PATTERN: "Expected a task id (the 26 characters bg_run or bg_list gave)",
}
"""The rules of Bastion's string patterns in words, for a person (a regex is not one)."""


def _names(message_type: Any) -> str:
    members = get_args(message_type) or (message_type,)
    return " or ".join(getattr(member, "__name__", str(member)) for member in members)


def _in_words(rule: str) -> str:
    """msgspec's rule as a person reads it: a known pattern in words, an unknown field
    named when it is a plain short name, a rule that would echo a value without it."""
    pattern = _PATTERN_RULE.match(rule)
    if pattern is not None:
        return _PATTERN_WORDS.get(pattern.group(1).replace("\\\\", "\\"), rule)
    field = _UNKNOWN_FIELD.match(rule)
    if field is not None:
        return f"Object contains a field the message does not have: `{field.group(1)}`"
    for echoing, safe in _ECHOING_RULES:
        if rule.startswith(echoing):
            return safe
    return rule


def describe_decode_error(error: msgspec.MsgspecError, message_type: Any) -> str:
    """A sentence for a payload that is not the expected message, echoing none of it.

    It names the field (its path in the schema) and the rule broken, never a value sent.
    """
    name = _names(message_type)
    text = str(error).splitlines()[0] if str(error) else "unreadable"
    path = _PATH.search(text)
    rule = _in_words(text[: path.start()] if path else text)
    where = f" - at `{path.group(1)}`" if path else ""
    return f"the request is not a valid {name}: {rule[:300]}{where}"
