"""Whether an elicitation form asks for a secret: such a form is declined, never relayed.

A server has no business asking a person for a password, a key, a token, a one-time code
or a card number through the agent's channel: the answer would pass through the model's
transcript. The check reads the form's message and each field's name, title and
description, normalised (camelCase, snake_case and kebab-case split, accents dropped,
casefolded), for the stems and phrases of `_SECRET`; a `password` format or a write-only
field is a secret too. It errs towards declining: a form whose message merely mentions a
token is declined as well.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["asks_for_secret"]

_SECRET: Final = re.compile(
    r"\b(?:"
    # stems: any word starting so (passwords, passwort, tokens, credentials, secrets)
    r"pass(?:word|wort|wd|phrase|code|key)|kennwort|contrasena|senha|parol|mot de passe|"
    r"\w*secret|token|credential|privkey|api ?key|private ?key|ssh ?key|gpg ?key|"
    r"signing ?key|access ?key|seed ?phrase|mnemonic|one ?time|2 ?fa|mfa|totp|authenticator|"
    r"(?:recovery|backup|verification|security|auth|authentication|authorization|access|"
    r"login|confirmation|sms) ?code|\d+ ?digit|card ?number|credit ?card"
    r")|\b(?:"
    # whole words only (a pin, not a pineapple; a key, not a keyword)
    r"pwd|pins?|otps?|keys?|cvv|cvc|iban|ssn|card"
    r")\b"
)
_CAMEL: Final = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z0-9])(?=[A-Z][a-z])")
_SEPARATORS: Final = re.compile(r"[\W_]+")


def _normalised(text: str) -> str:
    """`text` as lower-case ASCII words separated by single spaces."""
    split = _CAMEL.sub(" ", text)
    plain = unicodedata.normalize("NFKD", split).encode("ascii", "ignore").decode()
    return " ".join(_SEPARATORS.sub(" ", plain.casefold()).split())


def _mentions_secret(text: str) -> bool:
    return _SECRET.search(_normalised(text)) is not None


def _field_is_secret(name: str, field: Mapping[str, Any]) -> bool:
    if field.get("format") == "password" or field.get("writeOnly") is True:
        return True
    texts = [name] + [str(field[part]) for part in ("title", "description") if part in field]
    return any(_mentions_secret(text) for text in texts)


def asks_for_secret(schema: Mapping[str, Any], message: str = "") -> bool:
    """True when the form's `message` or any field of its JSON Schema looks like it asks
    for a secret (or the schema is not the flat object of fields a form must be, which is
    declined the same way)."""
    if _mentions_secret(message):
        return True
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return True
    for name, field in properties.items():
        if not isinstance(field, Mapping) or _field_is_secret(str(name), field):
            return True
    return False
