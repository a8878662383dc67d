"""The kt_lib import graph has no cycle, counting imports inside functions.

Every module of kt_lib is parsed (never imported); each `import`/`from ... import` anywhere in
it (module level, functions, methods; not `if TYPE_CHECKING:` blocks, which never run) is an
edge to the kt_lib module it names: `from .x import name` points at `x`, and also at `x.name`
when that is a submodule. A package whose `__init__` imports every submodule dynamically
(`pkgutil.iter_modules`, e.g. kt_lib.models' registry) points at all of them. A child's
implicit import of its own parent package is not an edge (every package would be a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kt_lib"

# Cycles accepted for now: none.
PENDING: set[frozenset[str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """(node, function-level?) of every import that runs, skipping TYPE_CHECKING blocks."""

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            fn = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, in_function or fn)

    yield from walk(tree, False)


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return False


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Modules that import each other (strongly connected groups of two or more)."""
    groups, placed = [], set()
    for node in sorted(graph):
        if node in placed:
            continue
        group = {m for m in graph if reaches(graph, node, m) and reaches(graph, m, node)}
        placed |= group
        if len(group) > 1:
            groups.append(sorted(group))
    return groups


def import_graph() -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """The module graph and the function-level kt_lib imports (module, target, line)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    lazy = []
    for name, path in modules.items():
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        if path.name == "__init__.py" and "iter_modules" in source:
            graph[name] |= {m for m in modules if m.startswith(name + ".")}
        for node, in_function in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                while target and target not in modules:  # kt_lib.x.attr -> kt_lib.x
                    target = target.rpartition(".")[0] if target.startswith("kt_lib") else ""
                if not target or target == name or name.startswith(target + "."):
                    continue
                graph[name].add(target)
                if in_function and (name, target, node.lineno) not in lazy:
                    lazy.append((name, target, node.lineno))
    return graph, lazy


def test_kt_lib_has_no_import_cycle():
    graph, _ = import_graph()
    found = [c for c in cycles(graph) if frozenset(c) not in PENDING]
    assert not found, f"import cycles in kt_lib (function-level imports count): {found}"


def test_at_most_one_function_level_import_dodges_a_cycle():
    """A function-level import dodges a cycle when its target reaches back to its module."""
    graph, lazy = import_graph()
    pending = set().union(*PENDING)
    dodging = [(m, t, line) for m, t, line in lazy if m not in pending and reaches(graph, t, m)]
    assert len(dodging) <= 1, f"function-level imports that dodge a cycle: {dodging}"


def test_the_graph_sees_imports_inside_functions(tmp_path, monkeypatch):
    """The walker would catch a loop closed only by an import inside a function."""
    pkg = tmp_path / "kt_lib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")
    monkeypatch.setitem(globals(), "ROOT", pkg)
    graph, lazy = import_graph()
    assert ("kt_lib.sub.b", "kt_lib.a", 2) in lazy
    assert cycles(graph) == [["kt_lib.a", "kt_lib.sub.b"]]
    (pkg / "sub" / "b.py").write_text("def f():\n    import math\n")
    assert cycles(import_graph()[0]) == []
