"""Grading a task that runs no torch code never imports torch.

`import torch` costs seconds of CPU, paid by the grader and again by each check child, in every
grade a student, Gradescope or the suite runs. HW3's tasks run C-backed Python, and the kernel
tasks launch CUDA C on numpy arrays and judge it with a numpy float64 reference: none of their
processes should load torch. A `torch` package placed first on the path stands in for the real
one here: importing it leaves a mark and fails, so grading still scores full marks only if no
process (grader, check child) imported it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TRAP = '''import os
open(os.path.join(os.environ["PAGEDLAB_TORCH_TRAP"], f"imported-by-{os.getpid()}"), "w").close()
raise ImportError("torch was imported while grading a task that runs no torch code")
'''


def _trapped_env(tmp_path: Path) -> tuple[dict, Path]:
    """An environment whose `import torch` fails and leaves a file in the returned folder."""
    package = tmp_path / "trap" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(TRAP)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(os.environ, PAGEDLAB_TORCH_TRAP=str(marks), PAGEDLAB_IMPL="solutions",
               PYTHONPATH=os.pathsep.join(filter(None, [str(package.parent), os.environ.get("PYTHONPATH")])))
    env.pop("PAGEDLAB_GRADE_USER", None)  # no sandbox user: this test needs no `users` group
    return env, marks


def test_the_trap_catches_an_import_of_torch(tmp_path):
    env, marks = _trapped_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "no torch code" in done.stderr
    assert list(marks.iterdir())


def test_grading_an_hw3_task_and_the_kernel_task_never_imports_torch(tmp_path):
    """Public and hidden checks (hidden Task 1 runs the reference in a child of its own)."""
    env, marks = _trapped_env(tmp_path)
    results = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "pagedlab", "grade", "--impl", "solutions", "--tasks",
                           "task1,task10", "--json", str(results)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    importers = sorted(p.name for p in marks.iterdir())
    assert not importers, f"torch was imported while grading Tasks 1 and 10:\n{done.stdout}{done.stderr}"
    tests = json.loads(results.read_text())["tests"]
    assert [t["score"] for t in tests if t["max_score"]] == [t["max_score"] for t in tests if t["max_score"]]
    assert len([t for t in tests if t["max_score"]]) == 2, done.stdout


LIST_EVERY_TASK = '''
from pagedlab.grader import registry
from pagedlab.grader.pipeline import plan_for
from pagedlab.spec import manifest

for row in manifest.TABLE:
    if row.id != "task9":  # Task 9's expectations are torch's SDPA, computed by the grader
        checks, _ = plan_for(row, hidden=True, hidden_seed=1, hidden_from=registry.hidden_dir())
        assert checks, row.id
print("listed")
'''


@pytest.mark.task_wide
def test_the_grader_lists_every_task_but_task9_without_torch(tmp_path):
    """The grader imports each task's check modules (public and hidden) to plan its checks; for
    Tasks 6-8 the child runs torch, but the grader's records are committed or the reference's."""
    env, marks = _trapped_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", LIST_EVERY_TASK], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "listed" in done.stdout, done.stderr
    assert not list(marks.iterdir())
