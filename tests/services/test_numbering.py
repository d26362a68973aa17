"""`numbered_whole` answers, to the character, what `numbered` answers line by line."""

from __future__ import annotations

import io
import random

import pytest

from bastion.sandbox.numbering import MAX_LINE_CHARS, MAX_READ_CHARS, numbered, numbered_whole
from bastion.shared.errors import InvalidInput

ROOM = MAX_LINE_CHARS * 4

PIECES = [
    b"a",
    b"plain words",
    b"\n",
    b"\n",
    b"\r",
    b"\r\n",
    b"\t",
    "é".encode(),
    "😀".encode(),
    b"\xff",
    b"\xe2\x82",
    b"x" * (MAX_LINE_CHARS - 1),
    b"x" * MAX_LINE_CHARS,
    b"x" * (MAX_LINE_CHARS + 1),
    b"y" * (ROOM - 1),
    b"y" * ROOM,
    b"y" * (ROOM + 1),
    "é".encode() * (MAX_LINE_CHARS // 2),
    "😀".encode() * (MAX_LINE_CHARS // 4),
    "😀".encode() * (MAX_LINE_CHARS - 1),
    "😀".encode() * MAX_LINE_CHARS,
    b"\x0b\x0c\x1c\x85",
]


def both(data: bytes, offset: int, limit: int) -> tuple[str, str]:
    """What each numbering answers for `data`: its text, or its error's sentence."""
    answers = []
    for whole in (False, True):
        try:
            if whole:
                answers.append(numbered_whole(data, "f.txt", offset, limit))
            else:
                answers.append(numbered(io.BytesIO(data), "f.txt", offset, limit))
        except InvalidInput as error:
            answers.append(f"error: {error.message}")
    return answers[0], answers[1]


def test_both_numberings_answer_the_same_for_many_mixed_files() -> None:
    chance = random.Random(20261201)
    for _ in range(4000):
        data = b"".join(chance.choice(PIECES) for _ in range(chance.randint(0, 14)))
        offset = chance.choice([1, 1, 1, 2, 3, 5, 9])
        limit = chance.choice([1, 2, 3, 2000])
        first, second = both(data, offset, limit)
        assert first == second, (data[:80], offset, limit)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n",
        b"one",
        b"one\n",
        b"one\r\ntwo\r\n",
        b"a\rb\n",
        b"y" * ROOM,
        b"y" * ROOM + b"\n",
        b"y" * (ROOM - 1) + b"\r\n",
        b"y" * ROOM + b"\r\n",
        "😀".encode() * (MAX_LINE_CHARS // 4) + b"\n",
        "😀".encode() * MAX_LINE_CHARS,
        "😀".encode() * MAX_LINE_CHARS + b"\n",
        "😀".encode() * MAX_LINE_CHARS + b"\nnext\n",
        b"\x7fELF\x00\x01",
        b"fine\n" * 10 + b"\xff\xfe",
        b"z\n" * 5000,
        ("w" * 1000 + "\n").encode() * 300,
        ("v" * 100 + "\n").encode() * (MAX_READ_CHARS // 100),
    ],
    ids=lambda data: f"{len(data)}:{data[:12]!r}",
)
@pytest.mark.parametrize(("offset", "limit"), [(1, 2000), (1, 1), (2, 3), (4, 100_000), (400, 5)])
def test_both_numberings_answer_the_same_at_the_edges(data: bytes, offset: int, limit: int) -> None:
    first, second = both(data, offset, limit)
    assert first == second
