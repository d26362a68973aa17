"""A background task's log: redaction that holds across the chunks output arrives in, byte
offsets that end on whole characters, head + marker + tail."""

from __future__ import annotations

import base64
from pathlib import Path

from bastion.sandbox.tasks.log import TAIL_BYTES, TaskLog, read_log
from bastion.shared.redaction import Redactor

VALUE = "s3cr3t-VALUE-0123456789"


def test_a_value_split_across_chunks_is_cut_whole(tmp_path: Path) -> None:
    log = TaskLog(tmp_path / "t.log", 1 << 20, Redactor([("TOKEN", VALUE)]))
    encoded = base64.b64encode(VALUE.encode()).decode()
    for text in ("before ", VALUE[:5], VALUE[5:12], VALUE[12:], " middle ", encoded[:3]):
        log.feed(text.encode())
    log.settle()  # quiet for a moment: what is held back is written, cut
    log.feed((encoded[3:] + " after\n").encode())
    log.close()
    kept = (tmp_path / "t.log").read_text()
    assert VALUE not in kept and "[secret TOKEN]" in kept
    assert kept.startswith("before [secret TOKEN] middle ") and kept.endswith(" after\n")


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
