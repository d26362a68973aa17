"""Globs as `find_files` and `search_files` take them, turned into regular expressions.

`*` and `?` stay within one path component, `**` spans any number of them (`src/**/*.rs`
holds `src/a.rs` too), `[...]` is a character class (`[!...]` negated), `{a,b}` is either
alternative (`*.{ts,tsx}`). A pattern without `/` matches a name at any depth.
"""

from __future__ import annotations

import re
from typing import Final

from bastion.shared.errors import InvalidInput

__all__ = ["compile_glob"]

_MAX_ALTERNATIVES: Final = 256


def _expand(pattern: str) -> list[str]:
    """Every pattern `{a,b}` alternation gives, innermost first."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth = 0
    commas: list[int] = []
    for index in range(start, len(pattern)):
        char = pattern[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                pieces, last = [], start + 1
                for comma in commas:
                    pieces.append(pattern[last:comma])
                    last = comma + 1
                pieces.append(pattern[last:index])
                rest = _expand(pattern[index + 1 :])
                out = [
                    pattern[:start] + inner + tail
                    for piece in pieces
                    for inner in _expand(piece)
                    for tail in rest
                ]
                if len(out) > _MAX_ALTERNATIVES:
                    raise InvalidInput(
                        f"the pattern has more than {_MAX_ALTERNATIVES} {{a,b}} alternatives: "
                        "give a simpler pattern"
                    )
                return out
        elif char == "," and depth == 1:
            commas.append(index)
    raise InvalidInput("the pattern opens a { that it never closes: close it with }")


def _translate(pattern: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            out.append("(?:[^/]*/)*")
            index += 3
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := pattern.find("]", index + 2)) > 0:
            inner = pattern[index + 1 : end]
            negated = inner.startswith("!")
            inner = inner[1:] if negated else inner
            out.append(f"[{'^' if negated else ''}{inner.replace(chr(92), chr(92) * 2)}]")
            index = end + 1
            continue
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regular expression that matches a walk's `/`-joined path when the glob does."""
    regexes = []
    for alternative in _expand(pattern.strip()):
        glob = alternative.removeprefix("./")
        if "/" in glob.rstrip("/"):
            regexes.append(_translate(glob.lstrip("/")))
        else:
            regexes.append("(?:[^/]*/)*" + _translate(glob))
    try:
        return re.compile("(?:" + "|".join(regexes) + r")\Z", re.DOTALL)
    except re.error:
        raise InvalidInput(
            "the pattern is not a glob this tool reads: check its [...] classes"
        ) from None
