"""What goes into each service's image (deploy/images/images.toml) is what its code imports:
every third-party module is covered by a declared distribution, and nothing of another
boundary comes along."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGES = tomllib.loads((REPO / "deploy" / "images" / "images.toml").read_text())
SERVICES = tuple(IMAGES["service"])
ROOTS = {"proto": REPO / "proto", "shared": REPO / "shared", "cli": REPO / "cli"} | {
    name: REPO / "services" / name for name in SERVICES
}


def _path(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] != "bastion" or len(parts) < 2 or parts[1] not in ROOTS:
        return None
    base = ROOTS[parts[1]].joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module `path` imports, at any depth (a function's import counts)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found |= {name} | {f"{name}.{alias.name}" for alias in node.names}
    return found


def _closure(service: str) -> tuple[set[str], set[str]]:
    """The Bastion modules `python -m bastion.<service>` can reach, and the third-party
    top-level modules they import."""
    seen: set[str] = set()
    third: set[str] = set()
    todo = [f"bastion.{service}.__main__"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _path(module)
        if path is None:
            continue
        for imported in _imports(path, module):
            parts = imported.split(".")
            if parts[0] == "bastion":
                todo += [".".join(parts[:n]) for n in range(2, len(parts) + 1)]
            elif parts[0] not in sys.stdlib_module_names and parts[0] != "__future__":
                third.add(parts[0])
    return {m for m in seen if _path(m)}, third


def _with_requirements(distributions: set[str]) -> set[str]:
    """`distributions` and everything they require to run (not their extras)."""
    found: set[str] = set()
    todo = [d.lower() for d in distributions]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # its marker left it out here (`exceptiongroup; python_version < "3.11"`)
        found.add(name)
        for requirement in requirements:
            if "extra ==" not in requirement:
                todo.append(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower())
    return {name.replace("_", "-") for name in found}


@pytest.mark.parametrize("service", SERVICES)
def test_the_image_declares_a_distribution_for_every_module_the_service_imports(
    service: str,
) -> None:
    _, third = _closure(service)
    declared = {*IMAGES["common"]["requires"], *IMAGES["service"][service]["requires"]}
    installed = _with_requirements(declared)
    providers = metadata.packages_distributions()
    for module in third:
        owners = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        assert owners & installed, f"{service} imports {module} ({owners}): not in its image"


def test_no_service_carries_another_boundary_or_the_cli() -> None:
    for service in SERVICES:
        modules, third = _closure(service)
        packages = {".".join(m.split(".")[:2]) for m in modules}
        assert packages == {"bastion.proto", "bastion.shared", f"bastion.{service}"}, service
        # The sandbox runs Docker sandboxes; mcp imports the shared launchers' package.
        if service not in ("sandbox", "mcp"):
            assert "docker" not in third, service
    assert "cryptography" not in {*IMAGES["common"]["requires"]}
    assert "docker" not in IMAGES["service"]["vault"]["requires"]
