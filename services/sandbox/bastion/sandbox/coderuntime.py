"""The runtime a `run_code` program runs under, inside its sandbox (not imported: its text
is written read-only into the sandbox and run with `python3 -I`; standard library only).

It reads the program as the first line of its answers pipe, then runs it with `tools`,
`call` and `ToolError` defined: each call is one JSON line on the requests pipe
(`{"id", "tool", "input"}`) and one line back (`{"id", "text"}` or `{"id", "error":
{"code", "message"}}`). A program that raises is reported with its traceback (its own
frames only) and exit status 1.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any


class ToolError(Exception):
    """A tool the program called failed: `code` says how, `message` what to do instead."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class _Channel:
    """The two pipes to the sandbox service: requests out, answers in."""

    def __init__(self, requests: int, answers: int) -> None:
        self._requests = requests
        self._answers = os.fdopen(answers, "rb")
        self._sent = 0
        self._one_at_a_time = threading.Lock()  # a program's threads call in turn

    def _answer(self) -> dict[str, Any]:
        line = self._answers.readline()
        if not line:
            raise ToolError("unavailable", "the sandbox service no longer answers calls")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def program(self) -> str:
        code: str = self._answer()["program"]
        return code

    def call(self, name: str, given: dict[str, Any]) -> str:
        line = json.dumps({"id": self._sent + 1, "tool": name, "input": given}).encode() + b"\n"
        with self._one_at_a_time:
            self._sent += 1
            while line:
                line = line[os.write(self._requests, line) :]
            answer = self._answer()
        error = answer.get("error")
        if error is not None:
            raise ToolError(str(error["code"]), str(error["message"]))
        text: str = answer["text"]
        return text


class _Tools:
    """`tools.<name>(**input)`: a call of the session's tool `name`."""

    def __init__(self, call: Callable[..., str]) -> None:
        self._call = call

    def __getattr__(self, name: str) -> Callable[..., str]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda **given: self._call(name, **given)


def main() -> None:
    channel = _Channel(int(sys.argv[1]), int(sys.argv[2]))
    code = channel.program()

    def call(name: str, /, **given: Any) -> str:
        return channel.call(name, given)

    scope = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "tools": _Tools(call),
        "call": call,
        "ToolError": ToolError,
    }
    linecache.cache["<program>"] = (len(code), None, code.splitlines(True), "<program>")
    try:
        exec(compile(code, "<program>", "exec"), scope)
    except SystemExit:
        raise
    except BaseException as error:  # the program's own failure, reported as it happened
        frames = error.__traceback__.tb_next if error.__traceback__ is not None else None
        traceback.print_exception(type(error), error, frames)
        sys.exit(1)


if __name__ == "__main__":
    main()
