"""The tests' own shape: no module under `tests/` imports a test module (`test_*`) or a
`conftest`, and each shared fixture or helper name is defined in one place only.

What one test module needs of another goes to `tests/helpers/` (helpers) or to the
`conftest.py` of the folder both lie under (fixtures, which pytest finds by name). Ruff's
`banned-api` (pyproject.toml) names the conftest modules; it takes exact module names only,
so this test, reading every module's imports with `ast`, is what catches a `test_*` one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

HOMES = {
    "workspace": "tests/conftest.py",
    "plane": "tests/conftest.py",
    "plane_of": "tests/conftest.py",
    "open_session": "tests/helpers/session.py",
    "call": "tests/helpers/session.py",
    "pending": "tests/helpers/approvals.py",
    "answer": "tests/helpers/approvals.py",
}
"""Where each shared name is defined: one meaning for each across the suite."""

PROGRAMS = TESTS / "mcp_servers"
"""MCP servers the tests start as programs: their `call` and `answer` are no test's."""


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def forbidden_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """`line: module` for each import in `source` (the text of `module`) of a test module or
    a conftest, relative imports resolved against `module`."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [f"{node.lineno}: {t}" for t in targets if t and _is_test_module(t)]
    return found


def test_no_module_under_tests_imports_a_test_module_or_a_conftest() -> None:
    broken = []
    for path in sorted(TESTS.rglob("*.py")):
        hits = forbidden_imports(path.read_text(), _module_of(path), path.name == "__init__.py")
        broken += [f"{path.relative_to(ROOT)}:{hit}" for hit in hits]
    assert broken == [], "move what they import to tests/helpers/ or a conftest:\n" + "\n".join(
        broken
    )


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from tests.services.test_orchestrator import call\n", "tests.x.test_y", ["1: "]),
        ("import tests.e2e.test_bastion_up\n", "tests.x.test_y", ["1: "]),
        ("from tests.e2e import test_bastion_up\n", "tests.x.test_y", ["1: "]),
        ("from tests.conftest import ServiceRunner\n", "tests.x.test_y", ["1: "]),
        ("from .test_bastion_up import Up\n", "tests.e2e.test_y", ["1: "]),
        ("from . import conftest\n", "tests.e2e", ["1: "]),
        ("from tests.helpers.session import call\nimport pytest\n", "tests.x.test_y", []),
    ],
)
def test_the_check_finds_each_form_of_such_an_import(
    source: str, module: str, expected: list[str]
) -> None:
    found = forbidden_imports(source, module, is_package=module == "tests.e2e")
    assert [hit[:3] for hit in found[:1]] == expected


def test_each_shared_fixture_and_helper_name_is_defined_in_one_place() -> None:
    elsewhere = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.is_relative_to(PROGRAMS):
            continue
        where = str(path.relative_to(ROOT))
        for node in ast.parse(path.read_text()).body:  # a module's own names, not nested ones
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name in HOMES and HOMES[node.name] != where:
                elsewhere.append(f"{where}:{node.lineno}: {node.name}")
    assert elsewhere == [], (
        "these names have one meaning, defined in " + str(sorted(set(HOMES.values())))
        + "; give a different thing a different name:\n" + "\n".join(elsewhere)
    )  # fmt: skip
