"""Base classes and bounded field types shared by every message on the bus."""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = [
    "MAX_PATH",
    "MAX_TEXT",
    "NAME_PATTERN",
    "PATH_PATTERN",
    "SESSION_ID_PATTERN",
    "Identifier",
    "Ingress",
    "Message",
    "PathText",
    "SessionId",
    "Text",
    "name_meta",
]

MAX_TEXT = 4 * 1024 * 1024
"""Upper bound, in characters, of any free text field (NATS itself caps a message at 1 MiB
by default; the bound is here so a larger server limit never means unbounded input)."""

MAX_PATH = 4096
"""Upper bound of a filesystem path, as Linux's PATH_MAX."""


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """An internal message: unknown fields are skipped so that mixed versions interoperate."""


class Ingress(Message, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A message whose fields an agent or an outside client fills: unknown fields are refused."""


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
"""A name: letters, digits, `_`, `.` and `-`, starting with a letter or a digit."""
PATH_PATTERN = r"^[^\x00]*$"
"""A path: anything but a NUL."""
SESSION_ID_PATTERN = r"^[0-9a-f]{16}$"
"""A session id: 16 lowercase hex digits."""


def name_meta(max_length: int, description: str | None = None) -> msgspec.Meta:
    """The bounds of a name (`NAME_PATTERN`) of at most `max_length` characters."""
    return msgspec.Meta(
        min_length=1, max_length=max_length, pattern=NAME_PATTERN, description=description
    )


Identifier = Annotated[str, name_meta(64)]
"""A tenant or agent name: letters, digits, `_`, `.` and `-`, at most 64 characters."""

SessionId = Annotated[str, msgspec.Meta(pattern=SESSION_ID_PATTERN)]
"""A session id: 16 lowercase hex digits, also a NATS subject token and a KV key."""

Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
PathText = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATH, pattern=PATH_PATTERN)]
"""A path as given: no NUL, which no path may hold (the system refuses it)."""
