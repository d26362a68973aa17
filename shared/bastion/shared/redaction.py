"""Cutting leased secret values out of text, in the forms a program is likely to print them.

For each value: the value itself, its hex (lower and upper case), its URL-encoded forms,
its JSON-string form, and its base64 (standard and URL-safe alphabets) at each of the
three byte alignments. A value in the middle of a base64 blob encodes differently
depending on its offset, and the last digit of its encoding depends on the byte after it:
so each alignment's form is built from whole 3-byte groups only (the value less its first
0, 1 or 2 bytes, cut to a multiple of 3), which appear unchanged whatever surrounds it.
Every form may also be broken across lines (a line break between any two characters), as
`fold` or a base64 tool wrapping at 76 columns leaves it. Each stretch found becomes
`[secret NAME]`; stretches that overlap are cut as one.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Final

__all__ = ["MIN_FORM_LENGTH", "Redactor", "forms"]

MIN_FORM_LENGTH: Final = 4
"""A form shorter than this (a 6-byte value's base64 at one alignment is 4) is not looked
for: it would match unrelated text."""

_BREAK: Final = r"(?:\r?\n)?"


def _base64_forms(raw: bytes) -> Iterable[str]:
    for offset in range(3):
        rest = raw[offset:]
        whole = rest[: len(rest) // 3 * 3]
        if whole:
            yield base64.b64encode(whole).decode()
            yield base64.urlsafe_b64encode(whole).decode()


def forms(value: str) -> set[str]:
    """Every form of `value` the redactor looks for."""
    raw = value.encode()
    found = {
        value,
        raw.hex(),
        raw.hex().upper(),
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote(value),
        urllib.parse.quote_plus(value),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        *_base64_forms(raw),
    }
    return {form for form in found if len(form) >= MIN_FORM_LENGTH}


def _pattern(form: str) -> str:
    return _BREAK.join(re.escape(char) for char in form)


class Redactor:
    """Cuts a fixed set of (name, value) pairs out of any text it is given."""

    def __init__(self, secrets: Iterable[tuple[str, str]]) -> None:
        self._patterns: list[tuple[str, re.Pattern[str]]] = []
        for name, value in secrets:
            for form in sorted(forms(value), key=len, reverse=True):
                self._patterns.append((name, re.compile(_pattern(form))))

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def redact(self, text: str) -> str:
        """`text` with every form of every value replaced by `[secret NAME]`."""
        if not self._patterns or not text:
            return text
        spans: list[tuple[int, int, str]] = []
        for name, pattern in self._patterns:
            spans.extend((m.start(), m.end(), name) for m in pattern.finditer(text))
        if not spans:
            return text
        spans.sort(key=lambda span: (span[0], -span[1]))
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
