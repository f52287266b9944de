"""The old import paths of the modules the package boundary moved (pagedlab/_moved.py) still work
for one release: each one is the module at its new place, the same object, and says so once with
a DeprecationWarning. Nothing of pagedlab itself imports an old path."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pagedlab"


def _forwarders() -> dict[str, str]:
    """old module -> new module, read from the forwarding files themselves."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "forward"
                    and isinstance(node.args[1], ast.Constant)):
                parts = path.relative_to(ROOT).with_suffix("").parts
                found[".".join(parts)] = node.args[1].value
    return found


PROBE = """
import importlib, json, sys, warnings
out = {}
for old, new in json.loads(sys.argv[1]).items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    out[old] = {"same": module is importlib.import_module(new), "said": said}
print(json.dumps(out))
"""


def test_every_old_path_is_the_new_module_and_says_where_it_went():
    moved = _forwarders()
    assert {"pagedlab.checks.memory_manager", "pagedlab.sandbox.runner", "pagedlab.ctrack", "pagedlab.manifest",
            "pagedlab.trusted.expectations", "pagedlab.grading.cli"} <= set(moved)
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(moved)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert [old for old, got in found.items() if not got["same"]] == []
    # the first import of each old path warns, naming where it went
    silent = [old for old, got in found.items() if not any(f"{old} moved to" in s for s in got["said"])]
    assert silent == []


def test_nothing_in_pagedlab_imports_an_old_path():
    """Every import, relative ones and those inside functions too (test_import_cycles.imports)."""
    from test_import_cycles import _modules, imports

    old = set(_forwarders()) | {"pagedlab.checks", "pagedlab.grading", "pagedlab.trusted", "pagedlab.harness.answers",
                                "pagedlab.checks.drawn"}
    edges = imports(_modules())
    offenders = [f"{name} -> {target}" for name, targets in sorted(edges.items()) if name not in old
                 for target in sorted(targets) if target in old]
    assert offenders == []
