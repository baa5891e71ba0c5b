"""The modules of paramsym form layers: no import cycle among them, lazy imports included.

The import graph is read from the source with ``ast``: every ``import`` and ``from … import``
anywhere in a module (function bodies and ``if TYPE_CHECKING:`` blocks included, relative or
absolute) is an edge from that module to the paramsym module it names. A package is its
``__init__``. ``from package import name`` is an edge to ``package.name`` when that is a module,
to ``package`` otherwise. Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``;
those implicit edges are not counted (every package that re-exports its modules would be a
cycle with each of them), only the module an import statement names.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"

ALLOWED_CYCLES: list[set[str]] = []
"""Strongly connected groups of modules tolerated for now, each with its reason (none)."""


def _modules(source: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package ``__init__``) for every module of ``package``."""
    found = {}
    for path in sorted((source / package).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _known(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest prefix of the dotted ``name`` that is a module of the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(source: Path, package: str = "paramsym") -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (see the module docstring)."""
    modules = _modules(source, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_known(alias.name, modules) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                for alias in node.names:
                    submodule = f"{origin}.{alias.name}"
                    targets.append(submodule if submodule in modules else _known(origin, modules))
            graph[name].update(t for t in targets if t is not None and t != name)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return groups


def _describe(group: set[str], graph: dict[str, set[str]]) -> str:
    edges = [f"  {a} -> {b}" for a in sorted(group) for b in sorted(graph[a] & group)]
    return "\n".join([", ".join(sorted(group)), *edges])


def test_paramsym_modules_import_only_modules_below_them():
    graph = import_graph(SOURCE)
    cycles = [g for g in import_cycles(graph) if g not in ALLOWED_CYCLES]
    assert not cycles, "import cycles:\n" + "\n".join(_describe(g, graph) for g in cycles)


def test_the_graph_sees_the_imports_inside_functions():
    graph = import_graph(SOURCE)
    assert len(graph) > 100
    # inside a function body (detection loads the graph package only when given an input)
    assert "paramsym.symmetry.graph" in graph["paramsym.symmetry.detect"]
    # a package __init__ importing its own modules
    assert "paramsym.symmetry.graph.trace" in graph["paramsym.symmetry.graph"]


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from pkg.sub import high\n")
    (package / "sub" / "__init__.py").write_text("from .high import g\n")
    (package / "sub" / "high.py").write_text("from .. import low\n\ndef g(): ...\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.low"] == {"pkg.sub.high"}
    assert graph["pkg.sub.high"] == {"pkg.low"}
    assert graph["pkg.sub"] == {"pkg.sub.high"}
    assert import_cycles(graph) == [{"pkg.low", "pkg.sub.high"}]
