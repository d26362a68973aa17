"""Globs as `find_files` and `search_files` take them, in the shared wcmatch dialect.

`*` and `?` stay within one path component, `**` spans any number of them (`src/**/*.rs`
holds `src/a.rs` too), `[...]` is a character class (`[!...]` negated), `{a,b}` is either
alternative (`*.{ts,tsx}`). A pattern without `/` matches a name at any depth. Matching is
bounded: see `bastion.shared.patterns` for the caps and how `**` is matched.
"""

from __future__ import annotations

from bastion.shared.patterns import PathGlob, path_glob

__all__ = ["compile_glob"]


def compile_glob(pattern: str) -> PathGlob:
    """The matcher of a walk's `/`-joined paths that the glob matches.

    Raises:
        InvalidPattern: too long a pattern, too many `**` or `{a,b}` alternatives.
    """
    return path_glob(pattern.strip().removeprefix("./"), "full", anywhere=True)
