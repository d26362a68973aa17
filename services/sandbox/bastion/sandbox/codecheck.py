"""`diagnostics` and `run_tests`: which checker or tests a workspace has, run in its sandbox.

The program is picked from the files at the workspace's root (looked at without following
links), then run exactly as a `shell` command would be: the session's backend, network and
limits, `/bin/sh -c` in `/workspace`, output merged so that it reads in order. Python is
kept from writing bytecode caches into the workspace. A project that says how it tests
(`make test`) is taken at its word before a runner is guessed.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from bastion.proto.sandbox import CodeCheck, ExecResult
from bastion.sandbox.checkparse import problems, tally_tests
from bastion.shared.errors import InvalidInput

__all__ = ["Runner", "check_code", "root_files"]

Runner = Callable[[str], Awaitable[ExecResult]]
"""Runs one shell command in the session's sandbox."""

_QUIET_PYTHON: Final = "PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX=/tmp/pycache"
_SKIPPED: Final = r"(^|/)(\.git|\.venv|node_modules|target|__pycache__)(/|$)"
_MAX_PROBLEMS: Final = 200
_NO_NETWORK: Final = frozenset({"none", "declared"})
_TAIL_LINES: Final = 60
_TAIL_CHARS: Final = 8000
_PYTHON_MARKS: Final = ("pyproject.toml", "setup.py", "setup.cfg")


def root_files(workspace: Path) -> dict[str, bool]:
    """The names at the workspace's root, each with whether it is a regular file."""
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as scan:
            return {e.name: e.is_file(follow_symlinks=False) for e in scan}
    finally:
        os.close(fd)


def _has_test_target(workspace: Path, files: dict[str, bool]) -> bool:
    name = next((n for n in ("GNUmakefile", "makefile", "Makefile") if files.get(n)), None)
    if name is None:
        return False
    fd = os.open(workspace / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        text = stream.read(1024 * 1024).decode("utf-8", errors="replace")
    return re.search(r"^test\s*:", text, re.MULTILINE) is not None


def _is_python(files: dict[str, bool]) -> bool:
    return any(files.get(n) for n in _PYTHON_MARKS) or any(
        is_file and name.endswith(".py") for name, is_file in files.items()
    )


def _offline(network: str) -> str:
    """Cargo's `--offline` when the check's commands have no network: `none`, and `declared`,
    whose bridge a check never gets (only a skill's script declares hosts)."""
    return " --offline" if network in _NO_NETWORK else ""


async def _diagnostics_program(
    files: dict[str, bool], network: str, run: Runner
) -> tuple[str, str]:
    if files.get("Cargo.toml"):
        return "cargo check", f"cargo check{_offline(network)} --message-format=short"
    if files.get("go.mod"):
        return "go vet", "GOCACHE=/tmp/go-cache go vet ./..."
    if files.get("tsconfig.json"):
        return "tsc", "npx --no -- tsc --noEmit --pretty false"
    if _is_python(files):
        if (await run("command -v ruff >/dev/null 2>&1")).exit_status == 0:
            return "ruff check", "ruff check --output-format=concise --no-cache ."
        return "compileall", f"{_QUIET_PYTHON} python3 -m compileall -q -x '{_SKIPPED}' ."
    raise InvalidInput(
        "diagnostics found no project to check at the workspace's root: it looks for "
        "Cargo.toml, go.mod, tsconfig.json, or pyproject.toml, setup.py or *.py files"
    )


async def _tests_program(
    workspace: Path, files: dict[str, bool], network: str, run: Runner
) -> tuple[str, str]:
    if _has_test_target(workspace, files):
        return "make test", "make test"
    if files.get("Cargo.toml"):
        return "cargo test", f"cargo test{_offline(network)}"
    if files.get("go.mod"):
        return "go test", "GOCACHE=/tmp/go-cache go test -v ./..."
    if files.get("package.json"):
        return "npm test", "npm test"
    if _is_python(files) or "tests" in files:
        if (await run("python3 -c 'import pytest' >/dev/null 2>&1")).exit_status == 0:
            return "pytest", f"{_QUIET_PYTHON} python3 -m pytest -q -p no:cacheprovider"
        return "unittest", f"{_QUIET_PYTHON} python3 -m unittest discover -v"
    raise InvalidInput(
        "run_tests found no tests to run at the workspace's root: it looks for a Makefile "
        "with a test target, Cargo.toml, go.mod, package.json, or a Python project "
        "(pyproject.toml, setup.py, *.py)"
    )


def _tail(output: str) -> str:
    lines = output.rstrip("\n").splitlines()[-_TAIL_LINES:]
    return "\n".join(lines)[-_TAIL_CHARS:]


def _ending(result: ExecResult) -> str | None:
    if result.ended == "timeout":
        return "ran out of time (the sandbox's wall-clock limit) and was stopped"
    if result.ended == "signal":
        return f"was killed by signal {result.signal}"
    return None


def _diagnostics_text(label: str, result: ExecResult) -> str:
    found = problems(result.stdout)
    ending = _ending(result)
    if found:
        head = f"{label}: {len(found)} problem{'s' if len(found) != 1 else ''}"
        lines = found[:_MAX_PROBLEMS]
        if len(found) > _MAX_PROBLEMS:
            lines.append(f"... and {len(found) - _MAX_PROBLEMS} more")
        return "\n".join([head, *([f"{label} {ending}"] if ending else []), *lines])
    if ending is None and result.exit_status == 0:
        return f"no problems found by {label}"
    why = f"{label} {ending or f'exited with status {result.exit_status}'}"
    return f"{why}, naming no file and line; the end of its output:\n{_tail(result.stdout)}"


def _tests_text(label: str, result: ExecResult) -> str:
    counts = tally_tests(result.stdout)
    status = _ending(result) or f"exit status {result.exit_status}"
    if counts is None:
        head = f"{label}: {status}; its output did not say how many tests passed"
    else:
        head = f"{label}: {counts.passed} passed, {counts.failed} failed ({status})"
    lines = [head]
    if counts is not None and counts.failures:
        lines += [f"failed: {name}" for name in counts.failures[:50]]
    lines += ["--- end of output", _tail(result.stdout)]
    return "\n".join(lines)


async def check_code(workspace: Path, request: CodeCheck, run: Runner) -> tuple[str, str]:
    """Pick and run the checker or the tests; the program that ran and the report's text."""
    files = root_files(workspace)
    if request.what == "diagnostics":
        label, program = await _diagnostics_program(files, request.network, run)
    else:
        label, program = await _tests_program(workspace, files, request.network, run)
    result = await run(f"{program} 2>&1")
    if request.what == "diagnostics":
        return label, _diagnostics_text(label, result)
    return label, _tests_text(label, result)
