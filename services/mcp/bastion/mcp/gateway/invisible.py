"""Invisible and bidirectional Unicode in what an upstream server says: found, and shown."""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["suspicious_text", "visible"]

_BIDI: Final = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_ZERO_WIDTH: Final = frozenset([0x180E, 0x200B, 0x200C, 0x200D, 0x2060])
_SHOWN_AT_MOST: Final = 5


def _kind(char: str) -> str:
    point = ord(char)
    if 0xE0000 <= point <= 0xE007F:
        return "tag character"
    if point in _BIDI:
        return "bidirectional control"
    if point in _ZERO_WIDTH:
        return "zero-width character"
    if point == 0xFEFF:
        return "byte order mark"
    if 0xE0100 <= point <= 0xE01EF:
        return "variation selector"
    category = unicodedata.category(char)
    if category == "Cf":
        return "invisible format character"
    if category == "Cs":
        return "unpaired surrogate"
    return ""


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN_AT_MOST])
    return shown + (", …" if len(items) > _SHOWN_AT_MOST else "")


def suspicious_text(text: str, where: str = "the text") -> tuple[str, ...]:
    """Sentences naming each kind of invisible or bidirectional character in `text`, which
    ones (U+XXXX) and where (1-based character positions); () when there is none.

    Tag characters spell ASCII invisibly, so the text they hide is shown too.
    """
    found: dict[str, list[int]] = {}
    for position, char in enumerate(text, start=1):
        kind = _kind(char)
        if kind:
            found.setdefault(kind, []).append(position)
    sentences = []
    for kind, positions in found.items():
        points = sorted({ord(text[p - 1]) for p in positions})
        codes = _listed([f"U+{point:04X}" for point in points])
        at = _listed([str(p) for p in positions])
        count = len(positions)
        plural = "s" if count > 1 else ""
        sentence = f"{where} has {count} {kind}{plural} ({codes}) at character{plural} {at}"
        if kind == "tag character":
            hidden = "".join(
                chr(ord(text[p - 1]) - 0xE0000)
                for p in positions
                if 0xE0020 <= ord(text[p - 1]) < 0xE007F
            )
            if hidden:
                sentence += f", hiding the text {hidden[:200]!r}"
        sentences.append(sentence)
    return tuple(sentences)


def visible(text: str) -> str:
    """`text` with each invisible or bidirectional character shown as `<U+XXXX>`."""
    return "".join(f"<U+{ord(c):04X}>" if _kind(c) else c for c in text)
