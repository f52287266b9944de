"""The process boundary is the package boundary, and no import crosses it the wrong way.

    pagedlab/spec/      the standard library only: either side reads it without reaching the other
    pagedlab/drivers/   the check child's side: never an arrow to the grader (or its old paths)
    pagedlab/sandbox/   mechanism: never an arrow to the drivers or the grader
    pagedlab/grader/    root's side, sealed whole in the grading set-up (`sandbox/private.py`)

The grading set-up makes `pagedlab/grader/` root-only, so a driver that reached into it would work
on a laptop and in every ordinary test, and fail only in a sealed grade, as the sandbox user.
These tests read the imports (module level and inside functions alike, plus
`import_module`/`__import__` of a constant name) of every module: the package rules, arrow by
arrow, and the check child's whole reach, from its entry and every driver a plan can name, into
any sealed module, printing the path.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from test_import_cycles import _modules, _resolve, imports

from pagedlab.drivers import record
from pagedlab.grader.pipeline import plan_for, requests_for
from pagedlab.sandbox import private
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ROOT / "grading" / "hidden"
CHILD = "pagedlab.drivers.child"


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
            driver = (record.find_scenario_driver(req["driver"]) if "driver" in req
                      else record.find_public_driver(req["function"]))
            assert driver is c.driver
            starts.add(driver.__module__)
    assert "pagedlab.drivers.gpu" in starts and "pagedlab.drivers.drawn.memory_manager" in starts
    return starts


def test_nothing_the_check_child_can_load_imports_a_sealed_module(child_side):
    modules = _modules()
    sealed = _sealed_modules(modules)
    assert {"pagedlab.grader.trusted", "pagedlab.grader.trusted.expectations", "pagedlab.grader.answers"} <= sealed
    found = paths_into(sealed, child_side, graph(modules))
    assert found == [], "the check child can reach the sealed judge side:\n" + "\n".join(found)


def test_the_rule_sees_imports_inside_functions_and_by_name(tmp_path):
    # a driver's lazy import, and a module that names the judge side for import_module
    (tmp_path / "driver.py").write_text("def drive(run):\n    from pagedlab.grader.trusted import engines\n")
    (tmp_path / "named.py").write_text("import importlib\nJUDGE = 'pagedlab.grader.trusted.expectations'\n"
                                       "def get():\n    return importlib.import_module(JUDGE)\n")
    (tmp_path / "plain.py").write_text("import os\n")
    modules = {"pagedlab.driver": tmp_path / "driver.py", "pagedlab.named": tmp_path / "named.py",
               "pagedlab.plain": tmp_path / "plain.py", "pagedlab.grader.trusted": tmp_path / "t.py",
               "pagedlab.grader.trusted.engines": tmp_path / "e.py", "pagedlab.grader.trusted.expectations": tmp_path / "x.py"}
    for name in ("t.py", "e.py", "x.py"):
        (tmp_path / name).write_text("")
    edges = graph(modules)
    sealed = {"pagedlab.grader.trusted", "pagedlab.grader.trusted.engines", "pagedlab.grader.trusted.expectations"}
    assert paths_into(sealed, {"pagedlab.driver"}, edges) == ["pagedlab.driver -> pagedlab.grader.trusted",
                                                              "pagedlab.driver -> pagedlab.grader.trusted.engines"]
    assert paths_into(sealed, {"pagedlab.named"}, edges) == ["pagedlab.named -> pagedlab.grader.trusted.expectations"]
    assert paths_into(sealed, {"pagedlab.plain"}, edges) == []


# Arrows that may not exist, from any module of the first package to any module of the second.
# The old paths (checks, grading, trusted, harness.answers) forward to the grader for one release.
_OLD_GRADER_PATHS = ("pagedlab.checks", "pagedlab.grading", "pagedlab.trusted", "pagedlab.harness.answers")
FORBIDDEN = {
    "pagedlab.drivers": ("pagedlab.grader", *_OLD_GRADER_PATHS),
    "pagedlab.sandbox": ("pagedlab.drivers", "pagedlab.grader", *_OLD_GRADER_PATHS),
}


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def broken_rules(modules: dict, edges: dict) -> list[str]:
    """Every forbidden arrow, as "importer -> imported"."""
    found = []
    for name in sorted(modules):
        for package, banned in FORBIDDEN.items():
            if _inside(name, package):
                found += [f"{name} -> {t}" for t in sorted(edges.get(name, ())) if any(_inside(t, b) for b in banned)]
    return found


def _top_level_imports(path: Path) -> set[str]:
    """The top-level names of everything a file imports (relative imports as "." + module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." if node.level else (node.module or "").partition(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and (
                getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) in
                ("import_module", "__import__")):
            found.add(str(node.args[0].value).partition(".")[0])
    return found


BACKPORTS = {"tomli"}  # tomllib on Python 3.10 (spec/manifest.py reads tasks.toml)


def spec_outside_the_standard_library(modules: dict, edges: dict) -> list[str]:
    """What a module of pagedlab.spec imports besides the standard library and pagedlab.spec."""
    found = []
    for name in sorted(m for m in modules if _inside(m, "pagedlab.spec")):
        others = {t for t in _top_level_imports(modules[name])
                  if t not in sys.stdlib_module_names | BACKPORTS and t not in ("__future__", ".", "pagedlab")}
        others |= {t for t in edges.get(name, ()) if not _inside(t, "pagedlab.spec")}
        found += [f"{name} -> {t}" for t in sorted(others)]
    return found


def test_no_import_crosses_the_package_boundary_the_wrong_way():
    modules = _modules()
    edges = graph(modules)
    assert {"pagedlab.drivers.child", "pagedlab.grader.pipeline", "pagedlab.spec.catalog",
            "pagedlab.sandbox.process"} <= set(modules)
    found = broken_rules(modules, edges) + spec_outside_the_standard_library(modules, edges)
    assert found == [], "imports across the package boundary:\n" + "\n".join(found)


def test_the_package_rules_see_every_kind_of_arrow(tmp_path):
    files = {
        "pagedlab.drivers.lazy": "def f():\n    from pagedlab.grader import registry\n",
        "pagedlab.drivers.old": "import pagedlab.checks.framework\n",
        "pagedlab.drivers.ok": "from pagedlab.spec import catalog\nimport numpy\n",
        "pagedlab.sandbox.named": "import importlib\nimportlib.import_module('pagedlab.drivers.ok')\n",
        "pagedlab.spec.numeric": "import numpy\n",
        "pagedlab.spec.reach": "from ..engine import pool\n",
        "pagedlab.spec.plain": "import json\nfrom . import manifest\n",
    }
    modules = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        modules[name] = path
    for name in ("pagedlab.grader.registry", "pagedlab.checks.framework", "pagedlab.spec.manifest", "pagedlab.engine.pool"):
        modules[name] = tmp_path / "empty.py"
    (tmp_path / "empty.py").write_text("")
    edges = graph(modules)
    found = broken_rules(modules, edges)
    assert {"pagedlab.drivers.lazy -> pagedlab.grader.registry", "pagedlab.drivers.old -> pagedlab.checks.framework",
            "pagedlab.sandbox.named -> pagedlab.drivers.ok"} <= set(found)
    assert {arrow.partition(" ")[0] for arrow in found} == {"pagedlab.drivers.lazy", "pagedlab.drivers.old",
                                                            "pagedlab.sandbox.named"}
    found = spec_outside_the_standard_library(modules, edges)
    assert {"pagedlab.spec.numeric -> numpy", "pagedlab.spec.reach -> pagedlab.engine.pool"} <= set(found)
    assert {arrow.partition(" ")[0] for arrow in found} == {"pagedlab.spec.numeric", "pagedlab.spec.reach"}
