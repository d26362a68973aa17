"""The layers hold: `proto` imports nothing of ours, `shared` only `proto`, no service imports
another service (nor the CLI), and no two modules of ours import each other in a cycle.

The imports are read with `ast` from the source (nothing is imported), so a rule that breaks
names the file and the line. `docs/architecture.md` §10 says why the layers are so.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("orchestrator", "policy", "sandbox", "egress", "mcp", "vault", "hooks")
SOURCE_ROOTS = (
    ROOT / "proto",
    ROOT / "shared",
    ROOT / "cli",
    *(ROOT / "services" / name for name in SERVICES),
)


@dataclass(frozen=True)
class Import:
    """One import of a module of ours: who, where, and the module it loads."""

    importer: str
    path: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.importer} imports {self.target}"


def _module_name(source_root: Path, path: Path) -> str:
    parts = list(path.relative_to(source_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for source_root in SOURCE_ROOTS:
        for path in sorted((source_root / "bastion").rglob("*.py")):
            found[_module_name(source_root, path)] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (never run, so never a cycle)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _targets(module: str, path: Path, node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(module, path, node)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            yield submodule if submodule in MODULES else base


def _ours(target: str) -> str | None:
    """The module of ours `target` loads (the nearest one that exists), or None."""
    parts = target.split(".")
    while parts:
        name = ".".join(parts)
        if name in MODULES:
            return name
        parts.pop()
    return None


def _imports() -> list[Import]:
    found: list[Import] = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _runtime_nodes(tree):
            for target in _targets(module, path, node):
                ours = _ours(target)
                if ours is not None and ours != module:
                    line = getattr(node, "lineno", 0)
                    found.append(Import(module, path, line, ours))
    return sorted(found, key=lambda i: (str(i.path), i.line, i.target))


IMPORTS = _imports()


def _layer(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def _broken(allowed: dict[str, set[str]]) -> list[str]:
    return [
        str(i)
        for i in IMPORTS
        if _layer(i.importer) in allowed and _layer(i.target) not in allowed[_layer(i.importer)]
    ]


def test_the_source_roots_are_found() -> None:
    # Guards the rules below from passing on an empty tree (a moved folder, say).
    layers = {_layer(m) for m in MODULES}
    assert layers >= {"proto", "shared", "cli", *SERVICES}
    assert any(_layer(i.importer) == "shared" and _layer(i.target) == "proto" for i in IMPORTS)
    assert any(_layer(i.importer) == "cli" and _layer(i.target) in SERVICES for i in IMPORTS)


def test_proto_imports_nothing_of_ours() -> None:
    broken = _broken({"proto": {"proto"}})
    assert not broken, "bastion.proto may import only itself:\n" + "\n".join(broken)


def test_shared_imports_only_proto() -> None:
    broken = _broken({"shared": {"shared", "proto"}})
    assert not broken, "bastion.shared may import only itself and proto:\n" + "\n".join(broken)


def test_no_service_imports_another_service_or_the_cli() -> None:
    broken = _broken({name: {name, "shared", "proto"} for name in SERVICES})
    assert not broken, (
        "a service may import only itself, shared and proto (what two need goes to shared):\n"
        + "\n".join(broken)
    )


def _edges(imports: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in imports:
        edges.setdefault(i.importer, set()).add(i.target)
        edges.setdefault(i.target, set())
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a long import chain does not hit the recursion limit.
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(components)


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The finder itself, on a graph made here: x -> a -> b -> c -> a, and c -> d.
    edges = {"x": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    cycles = _cycles(_edges(IMPORTS))
    lines = [
        str(i) for cycle in cycles for i in IMPORTS if i.importer in cycle and i.target in cycle
    ]
    assert not cycles, "modules importing each other (break the cycle):\n" + "\n".join(lines)
