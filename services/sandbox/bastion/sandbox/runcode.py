"""`run_code`: a program run in a sandbox with no workspace and no network, each tool it
calls relayed to the orchestrator as a nested call of the run_code call.

The program runs cold, never in the session's warm sandbox: that one shows the workspace,
and the program must see nothing of it but what its tools read (docs/sandbox.md). It
speaks JSON lines over two inherited pipes (`coderuntime`): the first line this side
writes is the program itself, then one answer per request. A request names only `id`,
`tool` and `input`: the session and the parent call are this side's to say, so a program
cannot name another session's or another call's. Each line is bounded, each malformed one
answered with an error, and the 201st call refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Final

import anyio
import msgspec

from bastion.proto import errors as codes
from bastion.proto._base import Ingress
from bastion.proto.tools import ToolName
from bastion.shared.errors import BastionError
from bastion.shared.sandboxing.etc import DataFile

__all__ = [
    "MAX_CALLS",
    "MAX_REQUEST_BYTES",
    "PYTHON",
    "RUNTIME",
    "Ask",
    "Relay",
    "program_argv",
    "program_pipes",
    "runtime_file",
]

MAX_CALLS: Final = 200
"""The most tool calls one program makes."""
MAX_REQUEST_BYTES: Final = 512 * 1024
"""The longest request line a program may write (a call's input included)."""
PYTHON: Final = "/usr/bin/python3"
"""The machine's python3, shown read-only in the sandbox with `/usr`."""
RUNTIME: Final = "/bastion/runtime.py"
"""Where the runtime (`coderuntime`) is inside the sandbox, read-only."""
_RUNTIME_TEXT: Final = (Path(__file__).parent / "coderuntime.py").read_bytes()

Ask = Callable[[str, dict[str, Any]], Awaitable[str]]
"""A nested call made: the tool's name and input → its text (or a typed error raised)."""


class _Request(Ingress, frozen=True, kw_only=True):
    """One call as a program asks for it; any other field is refused."""

    id: Annotated[int, msgspec.Meta(ge=0)]
    tool: ToolName
    input: Annotated[dict[str, Any], msgspec.Meta(max_length=64)] = msgspec.field(
        default_factory=dict
    )


_SHAPE: Final = (
    'a request is one JSON object per line, {"id": N, "tool": NAME, "input": {...}}, and '
    "nothing else (the session and the parent call are not the program's to name): call "
    "tools as tools.<name>(...) or call(name, ...)"
)


def runtime_file() -> DataFile:
    """The runtime, as a file bubblewrap writes read-only into the sandbox."""
    return DataFile(RUNTIME, _RUNTIME_TEXT)


def program_argv(requests_fd: int, answers_fd: int) -> list[str]:
    """The program's command line inside: isolated Python (`-I`), no bytecode written."""
    return [PYTHON, "-I", "-B", RUNTIME, str(requests_fd), str(answers_fd)]


@contextlib.contextmanager
def program_pipes() -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """The program's pipes: (its requests end, this side's) and (its answers end, this
    side's), each at 10 or above (the sandbox's pid 1 uses 9); all closed on exit."""
    opened: list[int] = []
    try:
        requests_read, requests_write = os.pipe()
        opened += [requests_read, requests_write]
        answers_read, answers_write = os.pipe()
        opened += [answers_read, answers_write]
        theirs = [
            fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (requests_write, answers_read)
        ]
        opened += theirs
        yield (theirs[0], requests_read), (theirs[1], answers_write)
    finally:
        for fd in opened:
            os.close(fd)


def _error(call_id: int | None, code: str, message: str) -> dict[str, Any]:
    return {"id": call_id, "error": {"code": code, "message": message}}


class Relay:
    """This side of one program's pipes: the program first, then each request answered."""

    def __init__(self, requests: int, answers: int, ask: Ask) -> None:
        self._requests = requests
        self._answers = answers
        self._ask = ask
        self.calls = 0
        for fd in (requests, answers):
            os.set_blocking(fd, False)

    async def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\n"
        while data:
            await anyio.wait_writable(self._answers)
            try:
                data = data[os.write(self._answers, data) :]
            except BlockingIOError:
                continue

    async def _read(self) -> bytes:
        """What the program wrote next, b"" once it closed its end."""
        while True:
            await anyio.wait_readable(self._requests)
            try:
                return os.read(self._requests, 65536)
            except BlockingIOError:
                continue

    async def serve(self, code: str) -> None:
        """Give the program its code, then answer its requests until it closes its end (or
        the program's end is gone: the sandbox ended)."""
        with contextlib.suppress(BrokenPipeError):
            await self._write({"program": code})
            pending = b""
            discarding = False
            while chunk := await self._read():
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if discarding:
                        discarding = False
                    else:
                        await self._write(await self._answer(line))
                if len(pending) > MAX_REQUEST_BYTES:
                    pending = b""
                    if not discarding:
                        discarding = True
                        await self._write(
                            _error(
                                None,
                                codes.INVALID_INPUT,
                                f"a request line is longer than {MAX_REQUEST_BYTES} bytes: "
                                "it is skipped up to its end; give the tool a smaller input",
                            )
                        )

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            asked = msgspec.json.decode(line, type=_Request)
        except msgspec.DecodeError as error:
            return _error(None, codes.BAD_REQUEST, f"{_SHAPE} ({error})")
        self.calls += 1
        if self.calls > MAX_CALLS:
            return _error(
                asked.id,
                codes.QUOTA_EXCEEDED,
                f"a run_code program makes at most {MAX_CALLS} tool calls and this is call "
                f"{self.calls}: do the rest in another run_code call",
            )
        try:
            return {"id": asked.id, "text": await self._ask(asked.tool, asked.input)}
        except BastionError as error:
            return _error(asked.id, error.code, error.message)
