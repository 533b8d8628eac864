"""The layering docs/architecture.md describes, checked on the code: imports point down
(never from a lower layer to a higher one, never between the two ports) and no module
imports itself around a circle, counting imports inside functions too (they hid the
circles this test was written for)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# lower number = lower layer; a module may import its own layer and the ones below
LAYERS = {
    "marag": 0, "config": 0, "errors": 0, "registry": 0, "collector": 0,
    "trace": 1, "corpus": 2, "llm": 3, "index": 3, "agents": 4, "strategies": 5,
    "eval": 6, "synth": 6, "train": 7, "serve": 8,
    "cli": 9, "cli_options": 9, "models_cli": 9, "train_cli": 9,
}  # fmt: skip
PORTS = {"llm", "index"}  # the same level, and independent of each other


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the marag modules it imports; a name imported from a package counts as
    an import of the module the package takes it from."""
    files = {_name(p): p for p in (SRC / "marag").rglob("*.py")}
    packages = {_name(p) for p in (SRC / "marag").rglob("__init__.py")}

    def absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in files.items()}
    reexports = {}
    for pkg in packages:
        for node in ast.walk(trees[pkg]):
            if isinstance(node, ast.ImportFrom):
                origin = absolute(pkg, files[pkg], node)
                for alias in node.names:
                    reexports[(pkg, alias.asname or alias.name)] = origin if origin in files else None
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, tree in trees.items():
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom):
                origin = absolute(module, files[module], node)
                for alias in node.names:
                    if f"{origin}.{alias.name}" in files:
                        targets.append(f"{origin}.{alias.name}")
                    elif reexports.get((origin, alias.name)):
                        targets.append(reexports[(origin, alias.name)])
                    elif origin in files:
                        targets.append(origin)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name in files]
            for t in targets:  # a package's __init__ gathering its own modules is no circle
                if t != module and not (module in packages and t.startswith(module + ".")):
                    graph[module].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "marag"


def upward(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for a, targets in graph.items():
        for b in targets:
            la, lb = layer(a), layer(b)
            if LAYERS[lb] > LAYERS[la] or (la != lb and {la, lb} == PORTS):
                bad.append(f"{a} -> {b}")
    return sorted(bad)


def test_every_module_has_a_layer():
    assert {layer(m) for m in import_graph()} <= set(LAYERS)


def test_no_circles():
    assert circles(import_graph()) == []


def test_imports_point_down():
    assert upward(import_graph()) == []


def test_the_checks_would_catch_the_circles_they_were_written_for():
    graph = import_graph()
    for a, b in [("marag.cli", "marag.train_cli"), ("marag.eval.runner", "marag.eval.distributed")]:
        planted = {**graph, a: graph[a] | {b}, b: graph[b] | {a}}
        assert [a, b] in [sorted(g) for g in circles(planted)] or any({a, b} <= set(g) for g in circles(planted))
    assert upward({"marag.index.store": {"marag.strategies.base"}}) == ["marag.index.store -> marag.strategies.base"]
    assert upward({"marag.llm.chat": {"marag.index.base"}}) == ["marag.llm.chat -> marag.index.base"]
