"""Cutting leased secret values out of text, in the forms a program is likely to print them.

For each value: the value itself, its hex (lower and upper case), its URL-encoded forms,
its JSON-string form, the value reversed and spaced out (a blank between characters), its
base64 (standard and URL-safe alphabets) at each of the three byte alignments, its base32
at each of the five, and, for a value that is not ASCII, its punycode (what a host name
carries). A value in the middle of a base64 blob encodes
differently depending on its offset, and the last digit of its encoding depends on the
byte after it: so each alignment's form is built from whole 3-byte groups only (the value
less its first 0, 1 or 2 bytes, cut to a multiple of 3), which appear unchanged whatever
surrounds it (base32 likewise, in 5-byte groups). Every form is matched in any letter case
(a host name is folded to lower case on its way) and may be broken across lines or labels
(a line break or a dot between any two characters), as `fold`, a base64 tool wrapping at
76 columns, or a value spread over a host name's labels leaves it. Each stretch found
becomes `[secret NAME]`; stretches that overlap are cut as one.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Final

__all__ = ["MIN_FORM_LENGTH", "Redactor", "cut_spans", "forms", "fragment_forms", "whole_forms"]

MIN_FORM_LENGTH: Final = 4
"""A form shorter than this (a 6-byte value's base64 at one alignment is 4) is not looked
for: it would match unrelated text."""

_BREAK: Final = r"(?:\r?\n|\.)?"


def fragment_forms(raw: bytes, min_bytes: int = 1) -> set[str]:
    """The base64 and base32 encodings of `raw`'s whole groups at every alignment, each of
    at least `min_bytes` of the value."""
    found: set[str] = set()
    for group, encoders in (
        (3, (base64.b64encode, base64.urlsafe_b64encode)),
        (5, (base64.b32encode,)),
    ):
        for offset in range(group):
            rest = raw[offset:]
            whole = rest[: len(rest) // group * group]
            if whole and len(whole) >= min_bytes:
                found.update(encode(whole).decode() for encode in encoders)
    return found


def _punycode(value: str) -> set[str]:
    if value.isascii():
        return set()
    code = value.encode("punycode").decode("ascii")
    return {code, f"xn--{code}"}


def whole_forms(value: str) -> set[str]:
    """The forms of `value` that carry all of it: itself, hex, URL-encoded, JSON, reversed,
    spaced out, punycode."""
    raw = value.encode()
    return {
        value,
        raw.hex(),
        raw.hex().upper(),
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote(value),
        urllib.parse.quote_plus(value),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        value[::-1],
        " ".join(value),
        *_punycode(value),
    }


def forms(value: str) -> set[str]:
    """Every form of `value` the redactor looks for."""
    found = whole_forms(value) | fragment_forms(value.encode())
    return {form for form in found if len(form) >= MIN_FORM_LENGTH}


def _pattern(form: str) -> str:
    return _BREAK.join(re.escape(char) for char in form)


def cut_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end, name) stretch replaced by `[secret NAME]`; stretches
    that overlap are one cut, named after the first."""
    if not spans:
        return text
    spans = sorted(spans, key=lambda span: (span[0], -span[1]))
    out: list[str] = []
    at = 0
    cut_start, cut_end, cut_name = spans[0]
    for start, end, name in spans[1:]:
        if start < cut_end:  # overlapping stretches are one cut
            cut_end = max(cut_end, end)
            continue
        out += [text[at:cut_start], f"[secret {cut_name}]"]
        at = cut_end
        cut_start, cut_end, cut_name = start, end, name
    out += [text[at:cut_start], f"[secret {cut_name}]", text[cut_end:]]
    return "".join(out)


class Redactor:
    """Cuts a fixed set of (name, value) pairs out of any text it is given."""

    def __init__(self, secrets: Iterable[tuple[str, str]]) -> None:
        self._patterns: list[tuple[str, re.Pattern[str]]] = []
        for name, value in secrets:
            for form in sorted(forms(value), key=len, reverse=True):
                self._patterns.append((name, re.compile(_pattern(form), re.IGNORECASE)))

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """Where each form of each value is in `text`: (start, end, name), unordered."""
        found: list[tuple[int, int, str]] = []
        for name, pattern in self._patterns:
            found.extend((m.start(), m.end(), name) for m in pattern.finditer(text))
        return found

    def redact(self, text: str) -> str:
        """`text` with every form of every value replaced by `[secret NAME]`."""
        if not self._patterns or not text:
            return text
        return cut_spans(text, self.spans(text))
