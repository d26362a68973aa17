"""Glob patterns in one dialect (wcmatch's) for every caller, matched in bounded work.

Callers: hooks' tool-name patterns (`pattern_matches`: only `*` is special, and it spans
anything), pre-approval paths and `find_files`/`search_files` globs (`path_glob`). A path
pattern is split on `/`; each segment is compiled by wcmatch's fnmatch, whose `*` is an
atomic group (no backtracking from one `*` into the next), and `**` segments are matched
over the path's components by a table of (segment, component) pairs: the work grows with
pattern times path, never the exponential backtracking one big regular expression of
`**/**/…` or `*a*a*…b` gives. Path patterns are capped (`MAX_PATTERN_CHARS`,
`MAX_GLOBSTARS`, `MAX_ALTERNATIVES`), each refusal a sentence.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

import bracex
from wcmatch import fnmatch

from bastion.shared.errors import InvalidInput

__all__ = [
    "MAX_ALTERNATIVES",
    "MAX_GLOBSTARS",
    "MAX_PATTERN_CHARS",
    "InvalidPattern",
    "PathGlob",
    "path_glob",
    "pattern_matches",
]

MAX_PATTERN_CHARS: Final = 1024
MAX_GLOBSTARS: Final = 8
MAX_ALTERNATIVES: Final = 256
_FLAGS: Final = fnmatch.DOTMATCH
_GLOBSTAR: Final = None
"""A `**` segment in a compiled alternative: any number of components."""

Syntax = Literal["full", "plain"]
"""`full`: `*`, `?`, `**`, `[...]` classes (`[!...]` negated) and `{a,b}` alternatives.
`plain`: only `*`, `?` and `**`; every other character stands for itself."""


class InvalidPattern(InvalidInput):
    """A glob refused before any matching: too long, too many `**` or alternatives."""


def _segment(text: str) -> re.Pattern[str]:
    """One path component's pattern (no `/` in it), as wcmatch's fnmatch reads it."""
    return re.compile(fnmatch.translate(text, flags=_FLAGS)[0][0])


def _plain(text: str) -> str:
    """`text` with the characters only the full syntax gives meaning to escaped."""
    return re.sub(r"([\[\]\\])", r"\\\1", text)


@dataclass(frozen=True)
class PathGlob:
    """A compiled path glob: each alternative's segments, `None` standing for `**`."""

    alternatives: tuple[tuple[re.Pattern[str] | None, ...], ...]

    def match(self, path: str) -> bool:
        """Whether the `/`-joined relative `path` is matched by one of the alternatives."""
        components = path.split("/")
        return any(_matches(segments, components) for segments in self.alternatives)


def _matches(segments: tuple[re.Pattern[str] | None, ...], components: list[str]) -> bool:
    """Segments over components, as the set of component counts each prefix can consume:
    a `**` consumes any number (at least one when it ends the pattern: `notes/**` is what
    is under `notes`, not `notes` itself)."""
    count = len(components)
    reach = {0}
    for index, segment in enumerate(segments):
        if segment is _GLOBSTAR:
            least = min(reach) + (1 if index == len(segments) - 1 else 0)
            reach = set(range(least, count + 1))
        else:
            reach = {j + 1 for j in reach if j < count and segment.fullmatch(components[j])}
        if not reach:
            return False
    return count in reach


def _checked(pattern: str) -> None:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidPattern(
            f"the pattern is {len(pattern)} characters long, more than {MAX_PATTERN_CHARS}: "
            "give a shorter one"
        )


def _checked_globstars(parts: list[str]) -> None:
    globstars = parts.count("**")
    if globstars > MAX_GLOBSTARS:
        raise InvalidPattern(
            f"the pattern has {globstars} `**` segments, more than {MAX_GLOBSTARS}: one `**` "
            "already spans any number of directories, so give fewer"
        )


def _alternatives(pattern: str, syntax: Syntax) -> list[str]:
    if syntax == "plain":
        return [pattern]
    try:
        return bracex.expand(pattern, limit=MAX_ALTERNATIVES)
    except bracex.ExpansionLimitException:
        raise InvalidPattern(
            f"the pattern has more than {MAX_ALTERNATIVES} {{a,b}} alternatives: give a "
            "simpler pattern"
        ) from None


@functools.lru_cache(maxsize=1024)
def path_glob(pattern: str, syntax: Syntax = "full", anywhere: bool = False) -> PathGlob:
    """`pattern` compiled: `*` and `?` stay within one component, a `**` segment spans any
    number of them (`src/**/*.rs` holds `src/a.rs` too; a `**` inside a segment is a `*`).
    With `anywhere`, a pattern without `/` matches a name at any depth.

    Raises:
        InvalidPattern: the pattern is too long, has too many `**` segments or `{a,b}`
            alternatives; the sentence says which.
    """
    _checked(pattern)
    compiled: list[tuple[re.Pattern[str] | None, ...]] = []
    for alternative in _alternatives(pattern, syntax):
        parts = alternative.lstrip("/").split("/")
        if anywhere and "/" not in alternative.strip("/"):
            parts.insert(0, "**")
        _checked_globstars(parts)
        segments: list[re.Pattern[str] | None] = []
        for part in parts:
            if part == "**":
                if not segments or segments[-1] is not _GLOBSTAR:
                    segments.append(_GLOBSTAR)
            else:
                segments.append(_segment(part if syntax == "full" else _plain(part)))
        compiled.append(tuple(segments))
    _checked_count(compiled)
    return PathGlob(tuple(compiled))


def _checked_count(compiled: list[tuple[re.Pattern[str] | None, ...]]) -> None:
    segments = sum(len(alternative) for alternative in compiled)
    if segments > MAX_PATTERN_CHARS:
        raise InvalidPattern(
            f"the pattern's {{a,b}} alternatives make {segments} path segments, more than "
            f"{MAX_PATTERN_CHARS}: give a simpler pattern"
        )


@functools.lru_cache(maxsize=1024)
def _name_pattern(pattern: str) -> re.Pattern[str]:
    """A tool-name pattern: `*` spans any characters; nothing else is special."""
    return _segment(re.sub(r"([?\[\]\\])", r"\\\1", pattern))


def pattern_matches(patterns: Iterable[str], name: str) -> bool:
    """Whether `name` matches one of `patterns`; nothing but `*` is special."""
    return any(_name_pattern(p).fullmatch(name) for p in patterns)
