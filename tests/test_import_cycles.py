"""pagedlab's modules import each other without a cycle: every import (at module level and
inside functions alike, read with `ast`) points down a layering, so any module can be imported
first and none sees a half-initialised neighbour.

One kind of import is not an edge: one inside a module's `__getattr__` (PEP 562), which runs
only when a caller reads a name the module no longer defines, long after both modules loaded.
`pagedlab.checks` forwards the graded-cell names that moved up to `pagedlab.graded` that way,
for students' notebooks written before the move."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pagedlab"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(target: str, modules: dict) -> str | None:
    """The innermost pagedlab module a dotted name names (a name inside a module -> the module)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def _import_nodes(tree: ast.Module):
    """Every node of the module but those inside its module-level `__getattr__`."""
    lazy = {id(node) for top in tree.body
            if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
            for node in ast.walk(top)}
    return (node for node in ast.walk(tree) if id(node) not in lazy)


def imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the pagedlab modules it imports anywhere in its text, and their packages."""
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("pagedlab"):
                    resolved = _resolve(target, modules)
                    # Importing a.b.c runs package a.b first, unless the importer is inside a.b
                    # (then a.b is already running); the root package aside: all import it.
                    parts = (resolved or "").split(".")
                    for depth in range(2, len(parts) + 1):
                        step = ".".join(parts[:depth])
                        if depth == len(parts) or not (name + ".").startswith(step + "."):
                            found.add(step)
        found.discard(name)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_finder_sees_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]


def test_only_a_module_getattr_forward_is_left_out(tmp_path):
    # a forward upward from `__getattr__` is no edge; the same import in any other function is
    (tmp_path / "low.py").write_text("def __getattr__(name):\n    from pagedlab import high\n"
                                     "    return getattr(high, name)\n"
                                     "def helper():\n    from pagedlab import high\n")
    (tmp_path / "high.py").write_text("from pagedlab import low\n")
    graph = imports({"pagedlab.low": tmp_path / "low.py", "pagedlab.high": tmp_path / "high.py"})
    assert graph == {"pagedlab.low": {"pagedlab.high"}, "pagedlab.high": {"pagedlab.low"}}
    (tmp_path / "low.py").write_text("def __getattr__(name):\n    from pagedlab import high\n")
    graph = imports({"pagedlab.low": tmp_path / "low.py", "pagedlab.high": tmp_path / "high.py"})
    assert graph == {"pagedlab.low": set(), "pagedlab.high": {"pagedlab.low"}}


def test_pagedlab_has_no_import_cycle():
    found = [sorted(c) for c in cycles(imports(_modules()))]
    assert found == [], "import cycles among pagedlab modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_a_notebook_from_before_the_move_still_grades_through_checks():
    # the registry and the child's runner load without the graded module; reading the old name
    # `pagedlab.checks.run` (a student's old graded cell) then gives the graded module's own
    code = ("import sys, pagedlab.grader.pipeline, pagedlab.checks as checks\n"
            "assert 'pagedlab.graded' not in sys.modules, 'importing the registry loaded the entry point'\n"
            "old = (checks.run, checks.require, checks.results, checks.Result)\n"
            "graded = sys.modules['pagedlab.graded']\n"
            "assert old == (graded.run, graded.require, graded.results, graded.Result)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
