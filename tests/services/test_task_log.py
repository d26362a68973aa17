"""A background task's log: redaction that holds across the chunks output arrives in, byte
offsets that end on whole characters, head + marker + tail."""

from __future__ import annotations

import base64
from pathlib import Path

from bastion.sandbox.tasks.log import RAW_TAIL_BYTES, TAIL_BYTES, TaskLog, read_log, read_page
from bastion.shared.redaction import Redactor

VALUE = "s3cr3t-VALUE-0123456789"


def test_a_value_split_across_chunks_is_cut_whole(tmp_path: Path) -> None:
    log = TaskLog(tmp_path / "t.log", 1 << 20, Redactor([("TOKEN", VALUE)]))
    encoded = base64.b64encode(VALUE.encode()).decode()
    for text in ("before ", VALUE[:5], VALUE[5:12], VALUE[12:], " middle ", encoded[:3]):
        log.feed(text.encode())
    log.feed((encoded[3:] + " after\n").encode())
    log.close()
    kept = (tmp_path / "t.log").read_text()
    assert VALUE not in kept and "[secret TOKEN]" in kept
    assert kept.startswith("before [secret TOKEN] middle ") and kept.endswith(" after\n")


def test_what_could_start_a_value_stays_off_the_disk_until_the_next_write_decides(
    tmp_path: Path,
) -> None:
    """However long the task pauses after half a value, the half is not written: a reader
    sees it only once the next write (or the end) shows whether a value goes on there; a
    service that dies meanwhile has written nothing of it."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 1 << 20, Redactor([("TOKEN", VALUE)]))
    log.feed(("ready\n" + VALUE[:9]).encode())
    held = path.read_text()
    log.feed((VALUE[9:] + "\n").encode())
    log.feed(b"later line, and more output after it: " + b"x" * 200 + b"\n")
    decided = path.read_text()
    log.close()
    assert VALUE[:9] not in held and VALUE[:9] not in decided
    assert decided.startswith("ready\n[secret TOKEN]\nlater line")
    assert path.read_text().endswith("x" * 200 + "\n")


def test_without_values_to_cut_nothing_is_held(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    log = TaskLog(path, 1 << 20, None)
    log.feed(b"listening on 127.0.0.1:8000\n")
    assert path.read_text() == "listening on 127.0.0.1:8000\n"
    log.close()


def test_a_value_split_across_a_long_stretch_of_output_is_cut(tmp_path: Path) -> None:
    log = TaskLog(tmp_path / "t.log", 1 << 20, Redactor([("TOKEN", VALUE)]))
    filler = "x" * 20000
    log.feed((filler + VALUE[:10]).encode())
    log.feed((VALUE[10:] + filler).encode())
    log.close()
    kept = (tmp_path / "t.log").read_text()
    assert kept == filler + "[secret TOKEN]" + filler


def test_a_read_ends_on_a_whole_character_and_goes_on_from_there(tmp_path: Path) -> None:
    log = TaskLog(tmp_path / "t.log", 1 << 20, None)
    log.feed("aé€😀z".encode())
    log.close()
    texts, offset = [], 0
    while True:
        data, size = read_log(tmp_path / "t.log", offset, 2)
        if not data:
            break
        texts.append(data.decode())  # never a character cut in two
        offset += len(data)
    assert "".join(texts) == "aé€😀z" and offset == size


def test_past_the_head_a_marker_and_at_the_end_the_last_32_kib(tmp_path: Path) -> None:
    log = TaskLog(tmp_path / "t.log", 1000, None)
    for i in range(20000):
        log.feed(f"{i}\n".encode())
    log.close()
    kept = (tmp_path / "t.log").read_bytes()
    everything = "".join(f"{i}\n" for i in range(20000)).encode()
    head, marker, rest = kept.partition(b"\n[bastion: the output went past 1000 bytes")
    assert marker and head == everything[:1000]
    tail = rest.partition(b"]\n")[2]
    assert tail == everything[-TAIL_BYTES:] and log.seen == len(everything)


def _tail(path: Path) -> str:
    return path.read_text().partition("bytes are appended when the task ends]\n")[2]


def test_past_the_head_output_is_not_cut_as_it_comes_nor_written_raw_but_cut_at_the_end(
    tmp_path: Path,
) -> None:
    """A flood past the head costs no cut: it is kept raw in memory (never on disk), and
    its tail is cut once, when the task ends."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 1000, Redactor([("TOKEN", VALUE)]))
    assert log.to_cut(65536) == 65536 + log.holds
    log.feed(b"x" * 1200)
    assert log.cut and log.to_cut(65536) == 0
    for _ in range(3):
        log.feed(f"line {VALUE} line\n".encode())
    assert VALUE not in path.read_text() and "line" not in path.read_text()
    log.close()
    assert VALUE not in path.read_text()
    assert _tail(path).endswith("line [secret TOKEN] line\n" * 3)


def test_a_value_held_when_the_head_fills_is_cut_with_its_rest_from_the_raw_tail(
    tmp_path: Path,
) -> None:
    """The chunk that fills the head ends inside a value: its start is held, its rest
    comes past the head (kept raw), and the end cuts them together."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 1000, Redactor([("TOKEN", VALUE)]))
    log.feed(("x" * 1500 + VALUE[:10]).encode())
    assert log.cut
    log.feed((VALUE[10:] + " end\n").encode())
    log.close()
    kept = path.read_text()
    assert VALUE[:10] not in kept and VALUE[10:] not in kept
    assert _tail(path) == "x" * 500 + "[secret TOKEN] end\n"


def test_a_raw_tail_that_lost_its_start_is_cut_as_after_a_gap(tmp_path: Path) -> None:
    """More than `RAW_TAIL_BYTES` past the head: the raw tail starts inside a value (its
    first half gone), so its first characters are dropped with that value's rest; a value
    whole in it is cut; the tail is at most `TAIL_BYTES`."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 100, Redactor([("TOKEN", VALUE)]))
    log.feed(b"x" * 400)
    assert log.cut
    half = len(VALUE) // 2
    log.feed(("y" * 5000 + VALUE).encode())
    filler = "z" * (RAW_TAIL_BYTES - (len(VALUE) - half) - len(VALUE) - 101)
    log.feed((filler + " " + VALUE + "z" * 100).encode())
    log.close()
    kept = path.read_text()
    tail = _tail(path)
    assert VALUE not in kept and VALUE[half:] not in kept and VALUE[half + 1 :] not in kept
    assert tail.endswith(" [secret TOKEN]" + "z" * 100)
    assert len(tail.encode()) == TAIL_BYTES and set(tail[:100]) == {"z"}


def test_pages_never_end_inside_a_value_the_reader_knows_and_the_writer_did_not(
    tmp_path: Path,
) -> None:
    """A value stored after the log was written (so it is there whole) is cut from every
    page, whatever the page size: no page ends inside it, so no two pages hold its halves."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 1 << 20, None)
    log.feed(f"ab {VALUE} cd {VALUE}".encode())
    log.close()
    redactor = Redactor([("TOKEN", VALUE)])
    for limit in (1, 5, 7, 15, 30):
        pages, offset = [], 0
        while offset < path.stat().st_size:
            text, read, _ = read_page(path, offset, limit, redactor)
            assert read > 0
            pages.append(text)
            offset += read
        assert "".join(pages) == "ab [secret TOKEN] cd [secret TOKEN]", (limit, pages)
        assert not any(VALUE[:4] in page or VALUE[-4:] in page for page in pages)


def test_a_value_stored_late_across_the_heads_end_is_cut_across_the_marker(
    tmp_path: Path,
) -> None:
    """From an attack: a value printed across the head's end before it was stored was
    written half in the head, half in the tail, the marker of what is left out between
    them, so no read found it and two pages gave it back whole. Cut at the end with the
    values known then: its head part is masked in place, its tail part dropped."""
    path = tmp_path / "t.log"
    log = TaskLog(path, 100, None)
    log.feed(b"x" * 90 + VALUE.encode() + b"y" * 50)
    log.recut(Redactor([("LATE", VALUE)]))  # stored while the task ran
    log.feed(b"z" * 10)
    log.close()
    kept = path.read_bytes()
    head, _, rest = kept.partition(b"\n[bastion: the output went past 100 bytes")
    tail = rest.partition(b"]\n")[2]
    assert len(head) == 100 and head.startswith(b"x" * 90)
    joined = (head + tail).decode()
    assert VALUE not in joined and not any(VALUE[:n] in joined for n in range(6, len(VALUE)))
    assert not any(VALUE[-n:] in joined for n in range(6, len(VALUE)))
    assert tail.endswith(b"y" * 50 + b"z" * 10)
