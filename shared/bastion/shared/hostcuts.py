"""Cutting secret values out of host names and connection lines by keyed digests alone.

The egress service must never hold a secret value, yet what it logs and stores (a refused
host name, a connection line) may carry one: a program can spell a value into the name it
asks for (`746f6b2d….evil.example`). So the sandbox service sends, with each call's grant,
a random salt and, for every form of every value (`bastion.shared.redaction`), the form's
length and its BLAKE2b-128 digest keyed by the salt: `form_digests`. The proxy's
`DigestCutter` folds the text it is about to record the way a host name is folded (lower
case, dots and line breaks dropped, each `xn--` label also read back from punycode),
hashes every stretch of each length there is a digest of, and replaces the stretches that
match with `[secret NAME]`. A connection line is at most a few hundred characters, so this
is a few thousand hashes.

Only forms that carry the whole value, or at least `MIN_FRAGMENT_BYTES` of it, are sent:
a digest of a shorter piece (a base64 group of three bytes) could be reversed by hashing
every possible piece.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from typing import Final

from bastion.proto.egress import MAX_FORM_DIGESTS, FormDigest
from bastion.shared.redaction import MIN_FORM_LENGTH, cut_spans, fragment_forms, whole_forms

__all__ = ["MIN_FRAGMENT_BYTES", "DigestCutter", "folded", "form_digests", "new_salt"]

MIN_FRAGMENT_BYTES: Final = 9
_PUNYCODE: Final = re.compile(r"xn--([a-z0-9-]+)")


def new_salt() -> bytes:
    return secrets.token_bytes(16)


def folded(text: str) -> tuple[str, list[tuple[int, int]]]:
    """`text` folded as a host name is compared (lower case, no dots or line breaks), and
    for each character of the result the stretch of `text` it came from."""
    out: list[str] = []
    origin: list[tuple[int, int]] = []
    for at, char in enumerate(text):
        if char in ".\r\n":
            continue
        for low in char.lower():
            out.append(low)
            origin.append((at, at + 1))
    return "".join(out), origin


def _decoded(text: str) -> tuple[str, list[tuple[int, int]]] | None:
    """`text` with each `xn--` label read back from punycode (each of its characters from
    the whole label), or None when it has none that decodes."""
    out: list[str] = []
    origin: list[tuple[int, int]] = []
    at = 0
    changed = False
    lower = text.lower()
    for match in _PUNYCODE.finditer(lower):
        try:
            label = match.group(1).encode("ascii").decode("punycode")
        except UnicodeError:
            continue
        out.append(text[at : match.start()])
        origin.extend((i, i + 1) for i in range(at, match.start()))
        out.append(label)
        origin.extend([match.span()] * len(label))
        at = match.end()
        changed = True
    if not changed:
        return None
    out.append(text[at:])
    origin.extend((i, i + 1) for i in range(at, len(text)))
    plain, inner = folded("".join(out))
    return plain, [(origin[start][0], origin[end - 1][1]) for start, end in inner]


def _digest(salt: bytes, form: str) -> bytes:
    return hashlib.blake2b(form.encode(), key=salt, digest_size=16).digest()


def form_digests(pairs: Iterable[tuple[str, str]], salt: bytes) -> tuple[FormDigest, ...]:
    """The keyed digest of each folded form of each (name, value), at most
    `MAX_FORM_DIGESTS` (the first pairs' first)."""
    found: dict[bytes, FormDigest] = {}
    for name, value in pairs:
        raw = value.encode()
        shapes = whole_forms(value) | fragment_forms(raw, min(len(raw), MIN_FRAGMENT_BYTES))
        for form in sorted(shapes):
            fold = folded(form)[0]
            if len(fold) < MIN_FORM_LENGTH:
                continue
            digest = _digest(salt, fold)
            found.setdefault(digest, FormDigest(name=name, length=len(fold), digest=digest))
    return tuple(found.values())[:MAX_FORM_DIGESTS]


class DigestCutter:
    """Cuts the forms a grant has digests of out of the lines the proxy records."""

    def __init__(self, salt: bytes, digests: Iterable[FormDigest]) -> None:
        self._salt = salt
        self._names = {d.digest: d.name for d in digests}
        self._lengths = sorted({d.length for d in digests if d.digest in self._names})

    def cut(self, text: str) -> str:
        """`text` with every stretch whose folded form has a digest replaced by
        `[secret NAME]`."""
        if not self._names or not text:
            return text
        spans: list[tuple[int, int, str]] = []
        views = [folded(text)]
        decoded = _decoded(text)
        if decoded is not None:
            views.append(decoded)
        for plain, origin in views:
            for length in self._lengths:
                for start in range(len(plain) - length + 1):
                    name = self._names.get(_digest(self._salt, plain[start : start + length]))
                    if name is not None:
                        end = start + length - 1
                        spans.append((origin[start][0], origin[end][1], name))
        return cut_spans(text, spans)
