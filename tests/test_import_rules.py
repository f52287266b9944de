"""The check child never reaches the judge side, not even through an import inside a function.

The grading set-up seals the judge side (`pagedlab/sandbox/private.py`: `pagedlab/trusted/`, the
answer models) root-only, so a driver that computes an answer works on a laptop and in every
ordinary test, and fails only in a sealed grade, as the sandbox user. This reads the imports
(module level and inside functions alike, plus `import_module`/`__import__` of a constant name)
of every module the child can load, starting from the child's entry and every driver a plan can
name, and fails on any path into a sealed module, printing the path.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_import_cycles import _modules, _resolve, imports

from pagedlab import manifest
from pagedlab.checks import framework
from pagedlab.sandbox import private
from pagedlab.sandbox.runner import plan_for, requests_for

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ROOT / "grading" / "hidden"
CHILD = "pagedlab.checks.child"


def _sealed_modules(modules: dict) -> set[str]:
    """The pagedlab modules inside the folders and files the grading set-up makes root-only."""
    sealed = {str((ROOT / name).resolve()) for name in private.ANSWERS}
    return {name for name, path in modules.items()
            if any(str(path.resolve()) == s or str(path.resolve()).startswith(s + "/") for s in sealed)}


def _named_imports(path: Path, modules: dict) -> set[str]:
    """Modules a file imports by a constant name: `import_module("pagedlab.x")`, `__import__(...)`,
    or a module-level constant holding the name."""
    tree = ast.parse(path.read_text(), str(path))
    constants = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for t in node.targets if isinstance(t, ast.Name)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and (
                getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) in
                ("import_module", "__import__")):
            arg = node.args[0]
            name = arg.value if isinstance(arg, ast.Constant) else constants.get(getattr(arg, "id", ""))
            if isinstance(name, str) and name.startswith("pagedlab"):
                found.add(_resolve(name, modules))
    return found - {None}


def graph(modules: dict) -> dict[str, set[str]]:
    edges = imports(modules)
    for name, path in modules.items():
        edges[name] |= _named_imports(path, modules)
    return edges


def paths_into(sealed: set[str], starts: set[str], edges: dict) -> list[str]:
    """One import path per sealed module reachable from `starts`, as "a -> b -> sealed"."""
    came_from = {s: None for s in starts}
    queue = sorted(starts)
    while queue:
        current = queue.pop(0)
        for nxt in sorted(edges.get(current, ())):
            if nxt not in came_from:
                came_from[nxt] = current
                queue.append(nxt)
    found = []
    for target in sorted(sealed & set(came_from)):
        chain = [target]
        while came_from[chain[-1]] is not None:
            chain.append(came_from[chain[-1]])
        found.append(" -> ".join(reversed(chain)))
    return found


@pytest.fixture(scope="module")
def child_side(request) -> set[str]:
    """The child's entry and the module of every driver a plan can name: each task's public and
    hidden checks (the instructor's planners), Task 10's GPU check included."""
    monkeypatch = pytest.MonkeyPatch()
    request.addfinalizer(monkeypatch.undo)
    monkeypatch.setenv("PAGEDLAB_GRADE_GPU", "1")
    starts = {CHILD}
    for task in manifest.TASKS:
        checks, plan = plan_for(manifest.task(task), hidden=True, hidden_seed=1, hidden_from=HIDDEN)
        for c, req in zip(checks, requests_for(checks, plan), strict=True):
            driver = (framework.find_scenario_driver(req["driver"]) if "driver" in req
                      else framework.find_public_driver(req["function"]))
            assert driver is c.driver
            starts.add(driver.__module__)
    assert "pagedlab.checks.gpu" in starts and "pagedlab.checks.drawn.memory_manager" in starts
    return starts


def test_nothing_the_check_child_can_load_imports_a_sealed_module(child_side):
    modules = _modules()
    sealed = _sealed_modules(modules)
    assert {"pagedlab.trusted", "pagedlab.trusted.expectations", "pagedlab.harness.answers"} <= sealed
    found = paths_into(sealed, child_side, graph(modules))
    assert found == [], "the check child can reach the sealed judge side:\n" + "\n".join(found)


def test_the_rule_sees_imports_inside_functions_and_by_name(tmp_path):
    # a driver's lazy import, and a module that names the judge side for import_module
    (tmp_path / "driver.py").write_text("def drive(run):\n    from pagedlab.trusted import engines\n")
    (tmp_path / "named.py").write_text("import importlib\nJUDGE = 'pagedlab.trusted.expectations'\n"
                                       "def get():\n    return importlib.import_module(JUDGE)\n")
    (tmp_path / "plain.py").write_text("import os\n")
    modules = {"pagedlab.driver": tmp_path / "driver.py", "pagedlab.named": tmp_path / "named.py",
               "pagedlab.plain": tmp_path / "plain.py", "pagedlab.trusted": tmp_path / "t.py",
               "pagedlab.trusted.engines": tmp_path / "e.py", "pagedlab.trusted.expectations": tmp_path / "x.py"}
    for name in ("t.py", "e.py", "x.py"):
        (tmp_path / name).write_text("")
    edges = graph(modules)
    sealed = {"pagedlab.trusted", "pagedlab.trusted.engines", "pagedlab.trusted.expectations"}
    assert paths_into(sealed, {"pagedlab.driver"}, edges) == ["pagedlab.driver -> pagedlab.trusted",
                                                              "pagedlab.driver -> pagedlab.trusted.engines"]
    assert paths_into(sealed, {"pagedlab.named"}, edges) == ["pagedlab.named -> pagedlab.trusted.expectations"]
    assert paths_into(sealed, {"pagedlab.plain"}, edges) == []
