"""Text cut piece by piece (`HeldCuts`) reads as the whole text cut at once, and no piece
shows part of a value, wherever the pieces are split."""

from __future__ import annotations

import base64
import itertools
import random

from bastion.shared.redaction import Redactor, out_of_stretches
from bastion.shared.streamcuts import HeldCuts

VALUE = "Tok-4f9a1c2e7b3d5a60"
TEXT = f"start\ntoken={VALUE}\nbase64 {base64.b64encode(VALUE.encode()).decode()} end\n"


def _pieces(text: str, *at: int) -> list[str]:
    bounds = [0, *at, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _fragments(value: str) -> list[str]:
    """Every stretch of `value` long enough to tell it by (half of it or more)."""
    least = len(value) // 2
    return [value[i:j] for i in range(len(value)) for j in range(i + least, len(value) + 1)]


def test_every_split_in_two_reads_as_the_whole_cut_and_shows_no_part_of_the_value() -> None:
    redactor = Redactor([("TOKEN", VALUE)])
    whole = redactor.redact(TEXT)
    for at in range(len(TEXT) + 1):
        cuts = HeldCuts(redactor)
        shown = [cuts.take(piece) for piece in _pieces(TEXT, at)]
        shown.append(cuts.end())
        assert "".join(shown) == whole, at
        for piece in shown:
            assert not any(fragment in piece for fragment in _fragments(VALUE)), (at, piece)


def test_a_value_written_a_character_at_a_time_is_cut() -> None:
    redactor = Redactor([("TOKEN", VALUE)])
    cuts = HeldCuts(redactor)
    shown = "".join(cuts.take(char) for char in TEXT) + cuts.end()
    assert shown == redactor.redact(TEXT)
    assert "[secret TOKEN]" in shown and VALUE not in shown


def test_text_with_no_values_to_cut_is_handed_on_at_once() -> None:
    cuts = HeldCuts(None)
    assert cuts.hold == 0
    assert cuts.take("partial li") == "partial li"
    assert cuts.take("ne\n") == "ne\n"
    assert cuts.end() == ""


def test_what_is_held_at_a_gap_is_dropped_and_so_is_as_much_after_it() -> None:
    redactor = Redactor([("TOKEN", VALUE)])
    cuts = HeldCuts(redactor)
    half = len(VALUE) // 2
    before = cuts.take("x" * 1000 + VALUE[:half])  # the gap holds the rest of the value
    held = cuts.holding
    cuts.gap()
    after = cuts.take(VALUE[half:] + "y" * 1000)
    end = cuts.end()
    shown = before + after + end
    assert not any(fragment in shown for fragment in _fragments(VALUE))
    assert VALUE[:half] not in before and VALUE[half:] not in after + end
    assert held and cuts.dropped == held + cuts.hold
    assert len(shown) == 2000 + len(VALUE) - cuts.dropped


def test_forms_overlapping_without_end_are_cut_as_they_come_and_what_is_held_stays_bounded() -> (
    None
):
    """A value like `aaaaaaaa` is found at every character of a run of `a`: the stretch
    never ends, so holding it whole would hold the whole stream (and look at it again at
    every piece). It is cut as it comes instead, holding at most twice the hold."""
    cuts = HeldCuts(Redactor([("RUN", "aaaaaaaa")]))
    shown = []
    for _ in range(50):
        shown.append(cuts.take("a" * 4096))
        assert cuts.holding <= 2 * cuts.hold
    shown.append(cuts.take("a" * 4096 + " end\n") + cuts.end())
    text = "".join(shown)
    assert text.endswith(" end\n") and "aaaaaaaa" not in text
    assert set(text[: -len(" end\n")].replace("[secret RUN]", "")) <= {"a"}


def _moved_one_at_a_time(spans: list[tuple[int, int, str]], cut: int, forward: bool) -> int:
    """`out_of_stretches` as a loop that moves the cut out of one stretch at a time."""
    moved = True
    while moved:
        moved = False
        for start, end, _ in spans:
            if start < cut < end:
                cut, moved = (end if forward else start), True
    return cut


def test_a_cut_moved_out_of_overlapping_stretches_lands_where_one_at_a_time_would() -> None:
    chance = random.Random(7)
    for _ in range(5000):
        spans = [
            (start := chance.randrange(60), start + chance.randrange(1, 15), "x")
            for _ in range(chance.randrange(8))
        ]
        cut = chance.randrange(80)
        for forward in (False, True):
            expected = _moved_one_at_a_time(spans, cut, forward)
            assert out_of_stretches(spans, cut, forward=forward) == expected, (spans, cut)
