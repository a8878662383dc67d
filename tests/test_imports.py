"""No import cycle through the experiment layer, counting imports inside functions: the AST of
every kt_lib module gives the graph (module -> kt_lib modules it imports, anywhere)."""

from __future__ import annotations

import ast
from pathlib import Path

import kt_lib

PACKAGE = Path(kt_lib.__file__).parent
# the layer this test guards (the model side's loops are guarded by its own split)
EXPERIMENT_LAYER = (
    "kt_lib.runs",
    "kt_lib.provenance",
    "kt_lib.fileio",
    "kt_lib.reports",
    "kt_lib.experiment",
    "kt_lib.leaderboard",
    "kt_lib.runner",
    "kt_lib.stats",
    "kt_lib.studies",
    "kt_lib.ablation",
    "kt_lib.search",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The kt_lib modules `path` imports (at the top or in a function)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # kt_lib.runs.tables.to_markdown -> kt_lib.runs.tables
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = list(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest import path from `start` back to itself, or None."""
    paths, seen = [[start]], {start}
    while paths:
        nxt = []
        for path in paths:
            for dep in sorted(graph.get(path[-1], ())):
                if dep == start:
                    return [*path, start]
                if dep not in seen:
                    seen.add(dep)
                    nxt.append([*path, dep])
        paths = nxt
    return None


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "kt_lib.runs.tables" in graph["kt_lib.stats"] or "kt_lib.runs.tables" in graph.get(
        "kt_lib.runs.stats", set()
    )
    toy = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle_through(toy, "a") == ["a", "b", "c", "a"] and cycle_through(toy, "d") is None


def test_no_cycle_through_the_experiment_layer():
    graph = import_graph()
    for name in sorted(graph):
        if name.startswith(EXPERIMENT_LAYER):
            assert cycle_through(graph, name) is None, " -> ".join(cycle_through(graph, name))
