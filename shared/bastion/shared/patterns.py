"""Tool-name patterns, as hooks name the calls they want: `*` stands for any characters."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

__all__ = ["pattern_matches"]


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def pattern_matches(patterns: Iterable[str], name: str) -> bool:
    """Whether `name` matches one of `patterns`; nothing but `*` is special."""
    return any(_compiled(p).fullmatch(name) for p in patterns)
