"""The warm sandbox's init as the service hands it over: compiled once by the machine's
python3, and its messages read and written as `json` reads and writes them."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from bastion.shared.sandboxing import BwrapBackend, SandboxFailed, SandboxSpec
from bastion.shared.sandboxing import warm_init as init
from bastion.shared.sandboxing.warm import CompiledInit, marked_pids, marker

PYTHON = "/usr/bin/python3"
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def magic(python: str) -> bytes:
    """The `.pyc` magic number of `python`."""
    return subprocess.run(
        [
            python,
            "-I",
            "-S",
            "-c",
            "import importlib.util as u, sys; sys.stdout.buffer.write(u.MAGIC_NUMBER)",
        ],
        check=True,
        capture_output=True,
    ).stdout


async def test_the_init_is_compiled_once_by_the_machines_python3_and_fits_a_pipe() -> None:
    compiled = CompiledInit(PYTHON)
    program = await compiled.program(ENV)
    assert program.startswith(magic(PYTHON))
    read_end, write_end = os.pipe()
    try:  # bwrap reads it from a pipe written in full before bwrap starts
        assert len(program) < fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert await compiled.program(ENV) is program  # not compiled again


async def test_a_python3_replaced_on_the_host_compiles_the_init_again(tmp_path: Path) -> None:
    python = tmp_path / "python3"
    shutil.copy2(PYTHON, python)
    compiled = CompiledInit(str(python))
    first = await compiled.program(ENV)
    shutil.copy2(PYTHON, tmp_path / "upgraded")
    (tmp_path / "upgraded").replace(python)  # as a package upgrade does: another file
    again = await compiled.program(ENV)
    assert again is not first and again == first


async def test_a_missing_python3_is_a_sandbox_failure_saying_what_the_init_needs(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "python3"
    with pytest.raises(SandboxFailed, match=f"init needs {missing}, the machine's python3"):
        await CompiledInit(str(missing)).program(ENV)


async def test_a_python3_that_cannot_compile_is_a_sandbox_failure_saying_why(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "python3"
    broken.write_text("#!/bin/sh\necho 'no compiler here' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(SandboxFailed, match=r"could not be compiled \(.*: no compiler here\)"):
        await CompiledInit(str(broken)).program(ENV)


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "run"},
        {"op": "run", "task": True},
        {"op": "kill"},
        {"op": "term", "x": [1, None, 2.5, False, 'é\n"\\\u0000', {"y": -3}]},
    ],
)
def test_the_init_reads_a_request_as_json_loads_does(request_: dict[str, object]) -> None:
    assert init._loads(json.dumps(request_).encode()) == request_


@pytest.mark.parametrize("text", [b"", b"{", b'{"op": "run"} {}', b"nope"])
def test_the_init_refuses_what_json_loads_refuses(text: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        init._loads(text)


@pytest.mark.parametrize(
    "fields",
    [
        {"op": "ready"},
        {"op": "exited", "status": -9},
        {"op": "failed", "why": 'the command could not be started ("é" \x00\n\t\u2028)'},
    ],
)
def test_the_inits_replies_are_written_byte_for_byte_as_json_dumps_writes_them(
    fields: dict[str, str | int],
) -> None:
    assert init._dumps(fields) == json.dumps(fields).encode()


def test_the_init_receives_a_message_and_its_descriptors_as_recv_fds_does() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    received: list[int] = []
    try:
        socket.send_fds(ours, [b'{"op": "run"}'], [read_end, write_end])
        request, received = init._receive(theirs)
        assert request == {"op": "run"} and len(received) == 2
        for fd in received:
            assert not os.get_inheritable(fd)
        os.write(received[1], b"x")
        assert os.read(read_end, 1) == b"x"  # the very pipe, by new numbers
        ours.close()
        assert init._receive(theirs) == (None, [])  # the service's end closed
    finally:
        for fd in (read_end, write_end, *received):
            os.close(fd)
        ours.close()
        theirs.close()


async def test_a_service_compiles_the_init_as_it_starts_and_its_first_sandbox_runs_it(
    workspace: Path, tmp_path: Path
) -> None:
    backend = BwrapBackend(state_dir=tmp_path / "state")
    await backend.prepare()
    try:
        result = await backend.run(SandboxSpec(workspace=workspace, session_id="0" * 16), "echo hi")
        assert result.stdout == "hi\n"
        assert marked_pids(marker(tmp_path / "state"))  # a warm sandbox ran it
    finally:
        await backend.aclose()
