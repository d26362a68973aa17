"""Lines cut as the text they make, each keeping its place; the start of a text that goes
on; a text with gaps in it: no part of a value shown, wherever it falls."""

from __future__ import annotations

import re

from bastion.shared.linecuts import Line, around, cut_around_gaps, cut_lines, shown_start
from bastion.shared.redaction import Redactor

VALUE = "Tok-4f9a1c2e7b3d5a60"
REDACTOR = Redactor([("TOKEN", VALUE)])
GAP = re.compile(r"^\[gap\]\n", re.MULTILINE)


def _fragments(value: str) -> list[str]:
    """Every stretch of `value` long enough to tell it by (half of it or more)."""
    least = len(value) // 2
    return [value[i:j] for i in range(len(value)) for j in range(i + least, len(value) + 1)]


def _shows_part(text: str) -> bool:
    return any(piece in text for piece in _fragments(VALUE))


def test_a_value_across_lines_is_cut_on_each_line_and_every_line_keeps_its_place() -> None:
    lines = ["first", f"token: {VALUE[:7]}", VALUE[7:14], "", f"{VALUE[14:]} rest", "last"]
    assert cut_lines(REDACTOR, [Line(text) for text in lines]) == [
        "first",
        "token: [secret TOKEN]",
        "[secret TOKEN]",
        "[secret TOKEN]",
        "[secret TOKEN] rest",
        "last",
    ]


def test_lines_from_the_middle_of_a_value_are_cut_with_the_text_around_them() -> None:
    lines = ["a", VALUE[:5], VALUE[5:10], VALUE[10:15], VALUE[15:], "b"]
    before, after = around(lines, 2, 4, REDACTOR.longest)
    shown = cut_lines(REDACTOR, [Line(text) for text in lines[2:4]], before, after)
    assert shown == ["[secret TOKEN]", "[secret TOKEN]"]
    assert cut_lines(REDACTOR, [Line(text) for text in lines[2:4]]) == lines[2:4]  # alone


def test_a_line_given_in_part_shows_no_start_of_a_value_running_past_it() -> None:
    for at in range(1, len(VALUE)):
        head = "x" * 500 + VALUE[:at]
        line = Line(head, end=VALUE[at:] + "y" * 20)
        shown = cut_lines(REDACTOR, [Line("before"), line, Line("after")])
        assert shown[0] == "before" and shown[2] == "after"
        assert not _shows_part(shown[1]) and VALUE[:at] not in shown[1][-at:]
        assert not _shows_part(shown_start(REDACTOR, head, 600))


def test_a_line_given_in_part_is_cut_with_the_line_before_it() -> None:
    line = Line(VALUE[9:] + " rest " + "x" * 500, end="x" * 200)
    assert cut_lines(REDACTOR, [Line("token: " + VALUE[:9]), line])[:2] == [
        "token: [secret TOKEN]",
        "[secret TOKEN] rest " + "x" * (500 - REDACTOR.longest + 1),
    ]


def test_the_next_line_after_a_line_given_in_part_is_cut_with_its_end() -> None:
    line = Line("x" * 500, end="z" * 50 + VALUE[:9])
    shown = cut_lines(REDACTOR, [line, Line(VALUE[9:] + " rest")])
    assert shown[1] == "[secret TOKEN] rest"


def test_what_is_beside_a_gap_is_dropped_as_far_as_a_value_spans() -> None:
    for at in range(1, len(VALUE)):
        text = "A" * 300 + VALUE[:at] + "\n[gap]\n" + VALUE[at:] + "C" * 300
        cut = cut_around_gaps(REDACTOR, text, GAP)
        assert "[gap]\n" in cut and not _shows_part(cut)
        assert cut.startswith("A" * (300 + at - REDACTOR.longest)) and cut.endswith("C" * 100)
    pad = "p" * REDACTOR.longest
    whole = f"one {VALUE}{pad}\n[gap]\n{pad}two {VALUE} three"
    assert cut_around_gaps(REDACTOR, whole, GAP).count("[secret TOKEN]") == 2
    assert cut_around_gaps(REDACTOR, f"no gap {VALUE} here", GAP) == "no gap [secret TOKEN] here"


def test_without_a_redactor_nothing_is_cut_or_dropped() -> None:
    assert cut_lines(None, [Line("a"), Line("b" * 10, end="b")]) == ["a", "b" * 10]
    assert shown_start(None, "abcdef", 3) == "abc"
    assert cut_around_gaps(None, "a\n[gap]\nb", GAP) == "a\n[gap]\nb"
