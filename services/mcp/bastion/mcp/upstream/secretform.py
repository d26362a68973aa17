"""Whether an elicitation form asks for a secret: such a form is declined, never relayed.

A server has no business asking a person for a password, a key, a token or a card number
through the agent's channel: the answer would pass through the model's transcript. The
check is by words in each field's name, title and description, and a `password` format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["asks_for_secret"]

_SECRET_WORDS: Final = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "passcode",
        "pwd",
        "secret",
        "secrets",
        "token",
        "tokens",
        "key",
        "keys",
        "apikey",
        "credential",
        "credentials",
        "card",
        "cvv",
        "cvc",
        "pin",
        "otp",
        "iban",
        "ssn",
    }
)
_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_WORD: Final = re.compile(r"[^a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_NOT_WORD.split(_CAMEL.sub(" ", text).lower())) - {""}


def _field_is_secret(name: str, field: Mapping[str, Any]) -> bool:
    if field.get("format") == "password" or field.get("writeOnly") is True:
        return True
    texts = [name] + [str(field[part]) for part in ("title", "description") if part in field]
    return any(_words(text) & _SECRET_WORDS for text in texts)


def asks_for_secret(schema: Mapping[str, Any]) -> bool:
    """True when any field of the form's JSON Schema looks like a secret (or the schema is
    not the flat object of fields a form must be, which is declined the same way)."""
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return True
    for name, field in properties.items():
        if not isinstance(field, Mapping) or _field_is_secret(str(name), field):
            return True
    return False
