"""`diagnostics` and `run_tests`: small real projects checked and tested in the sandbox.

This machine's `python3` inside the sandbox has neither ruff nor pytest, so the Python
checks here run `compileall` and `unittest` (or a Makefile's `test` target); what pytest,
cargo, go, tsc and jest print is covered by the parsers' own tests below.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import pytest

from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import CodeCheck, CodeReport, ExecResult, Limits
from bastion.sandbox.checkparse import problems, tally_tests
from bastion.sandbox.codecheck import Runner, check_code
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

SESSION = "0123456789abcdef"

UNIT_TESTS = """import unittest


class Arithmetic(unittest.TestCase):
    def test_adds(self):
        self.assertEqual(1 + 1, 2)

    def test_subtracts(self):
        self.assertEqual(2 - 1, 0)
"""


@pytest.fixture
async def sandbox(
    run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> AsyncIterator[None]:
    settings = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"))
    async with run_service(sandbox_service, settings):
        yield


def bytecode_dirs(workspace: Path) -> list[Path]:
    return list(workspace.rglob("__pycache__"))


async def check(
    client: Client, workspace: Path, what: Literal["diagnostics", "tests"], wall_s: float = 60
) -> CodeReport:
    message = CodeCheck(
        session_id=SESSION, workspace=str(workspace), what=what, limits=Limits(wall_s=wall_s)
    )
    report: CodeReport = await request(
        client, subjects.SANDBOX_CHECK_CODE, message, CodeReport, timeout_s=wall_s + 10
    )
    return report


async def test_diagnostics_names_a_python_syntax_error_by_file_and_line(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (workspace / "pkg").mkdir()
    (workspace / "pkg/good.py").write_text("x = 1\n")
    (workspace / "pkg/bad.py").write_text("x = 1\n\ndef broken(:\n    pass\n")
    report = await check(client, workspace, "diagnostics")
    assert report.program == "compileall"
    lines = report.text.splitlines()
    assert lines[0] == "compileall: 1 problem"
    assert lines[1].startswith("pkg/bad.py:3: SyntaxError")
    assert bytecode_dirs(workspace) == []  # nothing compiled is left in the workspace


async def test_diagnostics_says_when_it_found_no_problems(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "main.py").write_text("print('hi')\n")
    report = await check(client, workspace, "diagnostics")
    assert report.text == "no problems found by compileall"


async def test_run_tests_follows_a_makefile_test_target_and_names_the_failures(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "test_arith.py").write_text(UNIT_TESTS)
    (workspace / "Makefile").write_text(
        "test:\n\tPYTHONDONTWRITEBYTECODE=1 python3 -m unittest -v test_arith\n"
    )
    report = await check(client, workspace, "tests")
    lines = report.text.splitlines()
    assert report.program == "make test"
    assert lines[0].startswith("make test: 1 passed, 1 failed (exit status 2)")
    assert "failed: test_subtracts (test_arith.Arithmetic.test_subtracts)" in lines
    end = lines.index("--- end of output")
    assert "FAILED (failures=1)" in lines[end + 1 :]


async def test_run_tests_finds_a_python_projects_tests_without_a_makefile(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "setup.py").write_text("")
    (workspace / "test_arith.py").write_text(UNIT_TESTS)
    report = await check(client, workspace, "tests")
    assert report.program in ("pytest", "unittest")
    assert ": 1 passed, 1 failed (exit status " in report.text.splitlines()[0]
    assert bytecode_dirs(workspace) == []


async def test_run_tests_says_when_the_wall_clock_stopped_it(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "Makefile").write_text("test:\n\techo started; sleep 30\n")
    report = await check(client, workspace, "tests", wall_s=0.5)
    assert report.text.startswith("make test: ran out of time")
    assert "its output did not say how many tests passed" in report.text


@pytest.mark.parametrize(
    ("what", "looked_for"),
    [("diagnostics", "Cargo.toml, go.mod, tsconfig.json"), ("tests", "a Makefile")],
)
async def test_a_workspace_with_no_project_is_an_invalid_input_naming_what_was_looked_for(
    client: Client,
    sandbox: None,
    workspace: Path,
    what: Literal["diagnostics", "tests"],
    looked_for: str,
) -> None:
    (workspace / "notes.txt").write_text("nothing to build\n")
    with pytest.raises(RemoteError) as caught:
        await check(client, workspace, what)
    assert caught.value.code == codes.INVALID_INPUT
    assert looked_for in caught.value.message


# --- what other checkers and runners print -----------------------------------------------


def test_problems_reads_ruff_cargo_go_vet_and_tsc_output() -> None:
    output = "\n".join(
        [
            "app/main.py:3:8: F401 [*] `os` imported but unused",
            "Found 1 error.",
            "src/main.rs:2:5: error[E0425]: cannot find value `y` in this scope",
            'error: could not compile `demo` (bin "demo") due to 1 previous error',
            "./cmd/tool.go:10:2: fmt.Printf format %d has arg s of wrong type string",
            "src/app.ts(4,7): error TS2322: Type 'string' is not assignable to type 'number'.",
        ]
    )
    assert problems(output) == [
        "app/main.py:3: F401 [*] `os` imported but unused",
        "src/main.rs:2: error[E0425]: cannot find value `y` in this scope",
        "cmd/tool.go:10: fmt.Printf format %d has arg s of wrong type string",
        "src/app.ts:4: error TS2322: Type 'string' is not assignable to type 'number'.",
    ]


def test_test_counts_reads_pytest_cargo_go_and_jest_summaries() -> None:
    pytest_out = (
        "..F\nFAILED tests/test_a.py::test_two - assert 1 == 2\n1 failed, 2 passed in 0.03s\n"
    )
    cargo_out = (
        "test tests::ok ... ok\ntest tests::bad ... FAILED\n"
        "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured\n"
    )
    go_out = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL\n"
    jest_out = "  ● math › adds\nTests:       1 failed, 3 passed, 4 total\n"
    found = {
        name: (c.passed, c.failed, c.failures)
        for name, output in [
            ("pytest", pytest_out),
            ("cargo", cargo_out),
            ("go", go_out),
            ("jest", jest_out),
        ]
        if (c := tally_tests(output)) is not None
    }
    assert found == {
        "pytest": (2, 1, ["tests/test_a.py::test_two"]),
        "cargo": (1, 1, ["tests::bad"]),
        "go": (1, 1, ["TestB"]),
        "jest": (3, 1, ["math › adds"]),
    }


# --- cargo's --offline ------------------------------------------------------------------


def shell_with_a_cargo_that_prints_its_arguments(tmp_path: Path, workspace: Path) -> Runner:
    """Runs each command as the sandbox's `/bin/sh -c` would, with a `cargo` on PATH that
    prints how it was called (this machine's sandbox has no cargo to call)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"
    cargo.write_text('#!/bin/sh\necho "cargo called with: $*"\nexit 1\n')
    cargo.chmod(0o755)

    async def run(command: str) -> ExecResult:
        done = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            cwd=workspace,
            env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await done.communicate()
        return ExecResult(exit_status=done.returncode or 0, ended="exited", stdout=out.decode())

    return run


@pytest.mark.parametrize(
    ("network", "offline"), [("none", True), ("declared", True), ("host", False)]
)
@pytest.mark.parametrize("what", ["diagnostics", "tests"])
async def test_cargo_runs_offline_whenever_commands_have_no_network(
    tmp_path: Path,
    workspace: Path,
    network: str,
    offline: bool,
    what: Literal["diagnostics", "tests"],
) -> None:
    (workspace / "Cargo.toml").write_text('[package]\nname = "x"\nversion = "0.1.0"\n')
    request = CodeCheck(session_id=SESSION, workspace=str(workspace), what=what, network=network)
    run = shell_with_a_cargo_that_prints_its_arguments(tmp_path, workspace)
    label, text = await check_code(workspace, request, run)
    assert label == ("cargo check" if what == "diagnostics" else "cargo test")
    called = next(line for line in text.splitlines() if line.startswith("cargo called with:"))
    assert ("--offline" in called.split()) == offline
