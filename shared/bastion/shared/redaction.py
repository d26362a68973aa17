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

One pass over the text finds every form of every value: the text is folded to one letter
case character for character and its line-break characters and dots are dropped (where
they were is kept, to map what is found back), and one Aho-Corasick automaton of all the
forms, folded and dropped alike, runs over it (`ahocorasick_rs`, which lets go of the GIL
while it searches and while it is built). So the cost is linear in the text, whatever the
number of values, and no pattern can backtrack. Dropping the breaks may cut a little more
than a form (a value holding a dot is also cut where it is printed without it, or with
several breaks between two characters), never less. A form is looked for by its characters
that are not breaks: a dot or line break it starts or ends with is not cut with it, and a
form with fewer than `MIN_FORM_LENGTH` such characters is not looked for (it would match
unrelated text).
"""

from __future__ import annotations

import base64
import bisect
import json
import re
import urllib.parse
from collections.abc import Iterable
from itertools import accumulate
from typing import Final

import ahocorasick_rs

__all__ = [
    "MAX_BREAKS",
    "MIN_FORM_LENGTH",
    "Redactor",
    "cut_spans",
    "folded",
    "forms",
    "fragment_forms",
    "merged",
    "out_of_stretches",
    "whole_forms",
]

MIN_FORM_LENGTH: Final = 4
"""A form shorter than this (a 6-byte value's base64 at one alignment is 4) is not looked
for: it would match unrelated text."""

MAX_BREAKS: Final = 2
"""The most line-break characters and dots in a row (a CRLF) a form is surely found broken
by between two of its characters in text that arrives in pieces: what is held back reaches
no further (so a stream of blank lines is not held back whole). Text cut at once is cut
across any run."""

_BREAKS: Final = re.compile(r"[\r\n.]")
_DROP_BREAKS: Final = dict.fromkeys(map(ord, "\r\n."))
_DOTTED_CAPITAL_I: Final = "\u0130"
"""The one character whose lower case is two characters (`i` and a combining dot)."""
_SAME_CASE: Final = {"\u1fd3": "\u0390", "\u1fe3": "\u03b0", "\ufb05": "\ufb06"}
"""Characters a case-blind pattern matches to another although neither's upper case is one
character (they fold alike in full): each as the one it matches."""


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
    """The forms of `value` that carry all of it: itself (and as a program's case mapping
    writes it, which may change its length: `ß` upper-cased is `SS`), hex, URL-encoded,
    JSON, reversed, spaced out, punycode (of the value and of its lower case: a host name is
    lower-cased before it is encoded)."""
    raw = value.encode()
    return {
        value,
        value.upper(),
        value.lower(),
        value.casefold(),
        *_punycode(value.lower()),
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


def _fold_char(char: str) -> str:
    """One lower-case character as the others of its letter case fold to (`ſ` as `s`,
    `ς` as `σ`): the lower case of its upper case, when both are one character."""
    upper = char.upper()
    folded = upper.lower() if len(upper) == 1 else char
    return _SAME_CASE.get(char, folded if len(folded) == 1 else char)


def folded(text: str) -> str:
    """`text` in one letter case, character for character: each character matches another
    in any case (as a case-blind pattern does) just when both fold to the same one."""
    if text.isascii():
        return text.lower()
    lowered = text.replace(_DOTTED_CAPITAL_I, "i").lower()
    odd = {ord(c): f for c in set(lowered) if not c.isascii() and (f := _fold_char(c)) != c}
    return lowered.translate(odd) if odd else lowered


def _kept(form: str) -> str:
    """A form as the automaton looks for it: folded, its breaks dropped as a text's are, and
    without the breaks it starts or ends with."""
    return _Dropped(folded(form).strip("\r\n.")).text


class _Dropped:
    """A text as the automaton reads it — folded, its breaks dropped — and where each of its
    characters was in the text."""

    def __init__(self, text: str) -> None:
        self._text = text
        self.text = text.translate(_DROP_BREAKS)
        self._breaks: list[int] | None = None

    def where(self, index: int) -> int:
        """Where the character `index` of `text` was in the text."""
        if self._breaks is None:  # for each break, the characters kept before it
            self._breaks = list(accumulate(map(len, _BREAKS.split(self._text)[:-1])))
        return index + bisect.bisect_right(self._breaks, index)


def merged(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The (start, end, name) stretches in order, those that overlap as one, named after the
    first: one sort and one pass, however many overlap (a value like `aaaaaaaa` in a run of
    `a` is found at every character)."""
    out: list[tuple[int, int, str]] = []
    for start, end, name in sorted(spans, key=lambda span: (span[0], -span[1])):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2])
        else:
            out.append((start, end, name))
    return out


def cut_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end, name) stretch replaced by `[secret NAME]`; stretches
    that overlap are one cut, named after the first."""
    out: list[str] = []
    at = 0
    for start, end, name in merged(spans):
        out += [text[at:start], f"[secret {name}]"]
        at = end
    out.append(text[at:])
    return "".join(out)


def out_of_stretches(spans: list[tuple[int, int, str]], cut: int, *, forward: bool = False) -> int:
    """`cut` moved out of the (start, end, name) stretches it falls inside, stretches that
    overlap counting as one: back to where they start, or (`forward`) on to where they end."""
    for start, end, _ in merged(spans):
        if start < cut < end:
            return end if forward else start
        if start >= cut:
            break
    return cut


class Redactor:
    """Cuts a fixed set of (name, value) pairs out of any text it is given."""

    def __init__(self, secrets: Iterable[tuple[str, str]]) -> None:
        self.longest = 0
        """The most characters one stretch of a form spans (`MAX_BREAKS` breaks between
        each two of its characters): text that may end inside a stretch is held back by so
        much less one (`bastion.shared.streamcuts`)."""
        kept: dict[str, str] = {}
        for name, value in secrets:
            for form in sorted(forms(value), key=len, reverse=True):
                looked_for = _kept(form)
                if len(looked_for) >= MIN_FORM_LENGTH:
                    kept.setdefault(looked_for, name)
                    self.longest = max(self.longest, (MAX_BREAKS + 1) * len(form))
        self.longest_kept = max(map(len, kept), default=0)
        """The most characters that are not breaks one form has."""
        self._names = list(kept.values())
        """The name of each of the automaton's forms, by its index."""
        self.size = sum(map(len, kept))
        """The characters of every form looked for: what the automaton is built of."""
        self._automaton = (
            ahocorasick_rs.AhoCorasick(
                kept, implementation=ahocorasick_rs.Implementation.ContiguousNFA
            )
            if kept
            else None
        )

    def __bool__(self) -> bool:
        return self._automaton is not None

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """Each (start, end, name) stretch of `text` holding a form of a value."""
        return self._found(text)[0]

    def spans_and_tail(self, text: str) -> tuple[list[tuple[int, int, str]], int]:
        """`spans(text)`, and where what may begin a form that more text would complete
        starts: the last `longest_kept - 1` characters of `text` that are not breaks, no
        further back than `longest - 1` characters."""
        found, dropped = self._found(text)
        if dropped is None:
            return found, len(text)
        tail = len(dropped.text) - (self.longest_kept - 1)
        reach = len(text) - max(0, self.longest - 1)
        return found, max(dropped.where(tail) if tail > 0 else 0, reach, 0)

    def _found(self, text: str) -> tuple[list[tuple[int, int, str]], _Dropped | None]:
        if self._automaton is None:
            return [], None
        dropped = _Dropped(folded(text))
        matches = self._automaton.find_matches_as_indexes(dropped.text, overlapping=True)
        names, where = self._names, dropped.where
        return [(where(start), where(end - 1) + 1, names[i]) for i, start, end in matches], dropped

    def redact(self, text: str) -> str:
        """`text` with every form of every value replaced by `[secret NAME]`."""
        if not self or not text:
            return text
        return cut_spans(text, self.spans(text))
