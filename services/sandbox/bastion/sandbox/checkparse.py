"""Reading what a checker or a test runner printed: problems by file and line, test counts.

Parsers are tolerant: each looks for the lines its tool is known to print (ruff's concise
format, `cargo --message-format=short`, `go vet`, `tsc`, Python's compile errors; the
summaries of pytest, unittest, cargo test, go test -v, jest and mocha) and ignores the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Tally", "problems", "tally_tests"]

_AT_LINE: Final = re.compile(
    r"^(?P<file>[^\s:()][^:()]*?):(?P<line>\d+):(?:\d+:)?\s*(?P<msg>\S.*)$"
)
_TSC: Final = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+),\d+\): (?P<msg>.+)$")
_PY_WHERE: Final = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_PY_ERROR: Final = re.compile(r"^(?P<msg>\w*(?:Error|Warning|Exception)\b:?.*)$")


def _plain(path: str) -> str:
    return path.removeprefix("/workspace/").removeprefix("./")


def problems(output: str) -> list[str]:
    """Every `file:line: message` the output names, in order, each once."""
    found: list[str] = []
    where: tuple[str, str] | None = None
    for line in output.splitlines():
        py = _PY_WHERE.match(line)
        if py:
            where = (_plain(py["file"]), py["line"])
            continue
        error = _PY_ERROR.match(line)
        if where is not None and error:
            found.append(f"{where[0]}:{where[1]}: {error['msg']}")
            where = None
            continue
        match = _AT_LINE.match(line) or _TSC.match(line)
        if match and not match["file"].startswith(("http", "Found ")):
            found.append(f"{_plain(match['file'])}:{match['line']}: {match['msg'].strip()}")
    return list(dict.fromkeys(found))


@dataclass
class Tally:
    """How many tests passed and failed, and the failing ones by name."""

    passed: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)


def _pytest(output: str) -> Tally | None:
    summary = None
    for line in output.splitlines():
        if re.search(r"\d+ (passed|failed|errors?)\b.* in [\d.]+s", line):
            summary = line
    if summary is None:
        return None
    count = dict((word, int(n)) for n, word in re.findall(r"(\d+) (\w+)", summary))
    names = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    failed = count.get("failed", 0) + count.get("error", 0) + count.get("errors", 0)
    return Tally(count.get("passed", 0), failed, names)


def _unittest(output: str) -> Tally | None:
    ran = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    if ran is None:
        return None
    verdict = re.search(r"^FAILED \((.*)\)", output, re.MULTILINE)
    counts = dict(re.findall(r"(\w+)=(\d+)", verdict[1])) if verdict else {}
    failed = int(counts.get("failures", 0)) + int(counts.get("errors", 0))
    skipped = int(counts.get("skipped", 0))
    names = [
        f"{m[1]} ({m[2]})"
        for m in re.finditer(r"^(?:FAIL|ERROR): (\S+) \(([^)]+)\)", output, re.MULTILINE)
    ]
    return Tally(int(ran[1]) - failed - skipped, failed, names)


def _cargo(output: str) -> Tally | None:
    results = re.findall(r"test result: \w+\. (\d+) passed; (\d+) failed", output)
    if not results:
        return None
    names = re.findall(r"^test (\S+) \.\.\. FAILED$", output, re.MULTILINE)
    return Tally(sum(int(p) for p, _ in results), sum(int(f) for _, f in results), names)


def _go(output: str) -> Tally | None:
    passed = re.findall(r"^\s*--- PASS: (\S+)", output, re.MULTILINE)
    failed = re.findall(r"^\s*--- FAIL: (\S+)", output, re.MULTILINE)
    if not passed and not failed:
        return None
    return Tally(len(passed), len(failed), failed)


def _jest(output: str) -> Tally | None:
    line = re.search(r"^Tests:\s+(.*)$", output, re.MULTILINE)
    if line is None:
        return None
    count = dict((word, int(n)) for n, word in re.findall(r"(\d+) (\w+)", line[1]))
    names = re.findall(r"^\s*● (.+)$", output, re.MULTILINE)
    return Tally(count.get("passed", 0), count.get("failed", 0), names)


def _mocha(output: str) -> Tally | None:
    passing = re.search(r"^\s*(\d+) passing", output, re.MULTILINE)
    if passing is None:
        return None
    failing = re.search(r"^\s*(\d+) failing", output, re.MULTILINE)
    return Tally(int(passing[1]), int(failing[1]) if failing else 0)


def tally_tests(output: str) -> Tally | None:
    """The counts the first runner format found in `output` gives, or None."""
    for parser in (_pytest, _cargo, _unittest, _go, _jest, _mocha):
        counts = parser(output)
        if counts is not None:
            counts.failures = list(dict.fromkeys(counts.failures))
            return counts
    return None
