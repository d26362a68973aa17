"""The one glob dialect: each caller's documented semantics, and the caps' sentences."""

from __future__ import annotations

import pytest

from bastion.shared.patterns import InvalidPattern, path_glob, pattern_matches


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("src/**/*.rs", "src/a.rs", True),
        ("src/**/*.rs", "src/x/y/a.rs", True),
        ("*.py", ".hidden.py", True),
        ("*.py", "a/b/c.py", True),
        ("src/**", "src/a/b", True),
        ("src/**", "src", False),
        ("a/**/b", "a/b", True),
        ("[!a]x", "bx", True),
        ("[!a]x", "ax", False),
        ("*.{ts,tsx}", "d/a.tsx", True),
        ("a*", "a/b", False),
        ("notes/*", "notes/a/b", False),
        ("/notes/*", "notes/a", True),
    ],
)
def test_find_files_globs_keep_their_meaning(pattern: str, path: str, matches: bool) -> None:
    assert path_glob(pattern, "full", anywhere=True).match(path) is matches


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("x[y]", "x[y]", True),
        ("x{a,b}", "x{a,b}", True),
        ("x{a,b}", "xa", False),
        ("notes/**", "notes/a/b", True),
        ("notes/**", "notes", False),
        ("a?c", "abc", True),
        ("*.md", "d/x.md", False),
        ("**/*.md", "x.md", True),
    ],
)
def test_plain_globs_give_classes_and_braces_no_meaning(
    pattern: str, path: str, matches: bool
) -> None:
    assert path_glob(pattern, "plain").match(path) is matches


def test_tool_name_patterns_treat_only_the_star_as_special() -> None:
    assert pattern_matches(["mcp.*"], "mcp.git/log")
    assert not pattern_matches(["a?"], "ab")
    assert pattern_matches(["a?"], "a?")


@pytest.mark.parametrize(
    ("pattern", "sentence"),
    [
        ("x" * 1025, "more than 1024"),
        ("**/" * 9 + "x", "more than 8"),
        ("{a,b}" * 9, "more than 256 {a,b} alternatives"),
    ],
)
def test_a_pattern_past_a_cap_is_refused_with_a_sentence(pattern: str, sentence: str) -> None:
    with pytest.raises(InvalidPattern, match=sentence):
        path_glob(pattern)
