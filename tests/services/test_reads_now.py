"""`read_file_now` and `resolve_paths_now`: a read and a resolve answered on the event loop
answer exactly what the worker thread's would, and anything that could wait is left to it."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from bastion.proto import subjects
from bastion.proto.sandbox import FileResult, ReadFile, ResolvedPaths, ResolvePaths
from bastion.proto.toolinput import ReadFileInput
from bastion.sandbox.files import NOW_BYTES, NOW_LINES, NOW_STEPS, read_file, read_file_now
from bastion.sandbox.resolving import resolve_paths, resolve_paths_now
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError, RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

SESSION = "0123456789abcdef"

Outcome = tuple[str, str]


def outcome(answer: Callable[[], object]) -> Outcome:
    """What a call answered, or the type and sentence of the error it raised."""
    try:
        return "answer", repr(answer())
    except BastionError as error:
        return type(error).__name__, error.message


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A workspace with text, an empty file, a long line, CRLF, binary, a FIFO, a directory
    and links inside and out."""
    root = tmp_path / "work"
    (root / "real").mkdir(parents=True)
    (root / "real/notes.txt").write_text("".join(f"line {n}\n" for n in range(1, 41)))
    (root / "empty.txt").write_bytes(b"")
    (root / "long.txt").write_text("x" * 9000 + "\nshort")
    (root / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (root / "latin.txt").write_bytes("café\n".encode("latin-1"))
    os.mkfifo(root / "fifo")
    (root / "current").symlink_to("real")
    (root / "absolute").symlink_to("/workspace/real/notes.txt")
    (root / "up").symlink_to("..")
    (root / "real/back").symlink_to("..")
    (tmp_path / "outside.txt").write_text("secret\n")
    return root


READS = [
    ReadFileInput(path="real/notes.txt"),
    ReadFileInput(path="real/notes.txt", offset=3, limit=2),
    ReadFileInput(path="real/notes.txt", offset=41),
    ReadFileInput(path="/workspace/current/notes.txt"),
    ReadFileInput(path="absolute"),
    ReadFileInput(path="empty.txt"),
    ReadFileInput(path="long.txt"),
    ReadFileInput(path="crlf.txt"),
    ReadFileInput(path="latin.txt"),
    ReadFileInput(path="blob.bin"),
    ReadFileInput(path="fifo"),
    ReadFileInput(path="real"),
    ReadFileInput(path="missing.txt"),
    ReadFileInput(path="nowhere/missing.txt"),
    ReadFileInput(path="up/outside.txt"),
    ReadFileInput(path="../outside.txt"),
    ReadFileInput(path="/etc/passwd"),
]


@pytest.mark.parametrize("given", READS, ids=lambda given: f"{given.path}@{given.offset}")
def test_a_read_on_the_loop_answers_what_the_worker_thread_does(
    tree: Path, given: ReadFileInput
) -> None:
    now = outcome(lambda: read_file_now(tree, given))
    assert now != ("answer", "None")  # answered on the loop, not left to the thread
    assert now == outcome(lambda: read_file(tree, given))


def test_a_read_that_could_wait_is_left_to_the_worker_thread(tree: Path) -> None:
    (tree / "big.txt").write_bytes(b"y" * (NOW_BYTES + 1))
    (tree / "many.txt").write_bytes(b"\n" * (NOW_LINES + 1))
    deep = "real/../" * NOW_STEPS + "real/notes.txt"
    for path in ("big.txt", "many.txt", deep):
        given = ReadFileInput(path=path)
        assert read_file_now(tree, given) is None, path
        assert read_file(tree, given)  # the worker thread's read answers it
    assert read_file_now(tree, ReadFileInput(path="real/../" * 8 + "real/notes.txt"))


def _evicted(path: Path) -> bool:
    """Whether `path`'s pages are out of the page cache once dropped (not on tmpfs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT)
        except BlockingIOError:
            return True
        except OSError:  # a tmpfs answers RWF_NOWAIT with EOPNOTSUPP: it never waits
            return False
        return False
    finally:
        os.close(fd)


def _drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture
def on_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory whose files' pages can be dropped: the test's own, or, when that is a
    tmpfs (which keeps every file in memory), one beside the checkout, which is on disk."""
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * 4096)
    if _evicted(probe):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[2]) as beside:
        yield Path(beside)


def test_a_file_not_in_the_page_cache_is_read_by_the_worker_thread(on_disk: Path) -> None:
    uncached = on_disk / "uncached.txt"
    uncached.write_bytes(b"a line\n" * 100)
    if not _evicted(uncached):
        pytest.skip(f"neither {on_disk} nor the checkout's filesystem drops a file's pages")
    given = ReadFileInput(path="uncached.txt")
    # The probe's own read may have started a readahead: drop the pages again once it is done.
    for _ in range(5):
        time.sleep(0.05)
        _drop(uncached)
        if read_file_now(on_disk, given) is None:
            break
    else:
        pytest.fail("a read out of the page cache was answered on the event loop")
    assert read_file(on_disk, given).endswith("   100\ta line")


RESOLVES = [
    ("real/notes.txt",),
    ("current/notes.txt", "absolute", "real/back/current/x"),
    ("nowhere/deeper/new.txt", "current/new/a.md"),
    (".", "real"),
    ("up/outside.txt",),
    ("nowhere/../../x",),
    ("real/" + "../real/" * 8 + "x",),
]


@pytest.mark.parametrize("paths", RESOLVES, ids="+".join)
def test_a_resolve_on_the_loop_answers_what_the_worker_thread_does(
    tree: Path, paths: tuple[str, ...]
) -> None:
    asked = ResolvePaths(session_id=SESSION, workspace=str(tree), paths=paths)
    now = outcome(lambda: resolve_paths_now(tree, asked))
    assert now != ("answer", "None")
    assert now == outcome(lambda: resolve_paths(tree, asked))


def test_a_resolve_that_could_wait_is_left_to_the_worker_thread(tree: Path) -> None:
    patch = "*** Begin Patch\n*** Add File: current/a.md\n+a\n*** End Patch\n"
    deep = "real/../" * NOW_STEPS + "real/x"
    spread = tuple(f"real/../real/../real/../real/{n}" for n in range(16))
    for asked in (
        ResolvePaths(session_id=SESSION, workspace=str(tree), patch=patch),
        ResolvePaths(session_id=SESSION, workspace=str(tree), paths=(deep,)),
        ResolvePaths(session_id=SESSION, workspace=str(tree), paths=spread),
    ):
        assert resolve_paths_now(tree, asked) is None
    assert resolve_paths(
        tree, ResolvePaths(session_id=SESSION, workspace=str(tree), patch=patch)
    ) == ("real/a.md",)


@pytest.fixture
async def sandbox(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> AsyncIterator[None]:
    settings = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "st"))
    async with run_service(sandbox_service, settings):
        yield


async def test_the_service_answers_reads_and_resolves_either_way(
    client: Client, sandbox: None, tree: Path
) -> None:
    (tree / "big.txt").write_text("z\n" * NOW_BYTES)
    (tree / "huge.txt").write_text("h\n" * 4 * NOW_BYTES)  # numbered line by line
    deep = "real/../" * NOW_STEPS + "real/notes.txt"
    for path in ("real/notes.txt", "big.txt", "huge.txt", deep):
        given = ReadFileInput(path=path, offset=2, limit=3)
        message = ReadFile(session_id=SESSION, workspace=str(tree), input=given)
        result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
        assert result.text == read_file(tree, given)
    with pytest.raises(RemoteError) as raised:
        message = ReadFile(
            session_id=SESSION, workspace=str(tree), input=ReadFileInput(path="fifo")
        )
        await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    assert "not a regular file" in raised.value.message
    for paths in (("real/back/current/x",), ("real/../" * NOW_STEPS + "current/x",)):
        asked = ResolvePaths(session_id=SESSION, workspace=str(tree), paths=paths)
        answer = await request(client, subjects.SANDBOX_RESOLVE, asked, ResolvedPaths, timeout_s=10)
        assert answer.paths == ("real/x",)
