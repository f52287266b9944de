"""One task manifest (pagedlab/tasks.toml): the registry, the points, the README's course map,
notebook 00's table and the graded cells all agree with it, and adding a task through it works
end to end (the recipe in the README's instructor section, followed in a temporary copy)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pagedlab import manifest
from pagedlab.checks import framework

ROOT = Path(__file__).resolve().parent.parent


def _tasks_by_notebook() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in manifest.TABLE:
        found.setdefault(row.notebook, []).append(row.number)
    return found


def _numbers(text: str) -> list[int]:
    """'Tasks 1–2' / '3 `fork_sequence`, 4 `append_kv`' / '11, 12' -> the task numbers named."""
    text = re.sub(r"`[^`]*`", "", text)
    spans = [(int(a), int(b)) for a, b in re.findall(r"(\d+)\s*[–-]\s*(\d+)", text)]
    numbers = {n for a, b in spans for n in range(a, b + 1)}
    numbers |= {int(n) for n in re.findall(r"\d+", re.sub(r"\d+\s*[–-]\s*\d+", "", text))}
    return sorted(numbers)


@pytest.mark.task_wide
def test_every_task_has_its_checks_module_notebook_and_files():
    for row in manifest.TABLE:
        assert (ROOT / "pagedlab" / "checks" / f"{row.checks}.py").is_file(), row.id
        assert (ROOT / "notebooks" / f"{row.notebook}.py").is_file(), row.id
        for name in row.files:
            assert (ROOT / "solutions" / name).is_file() and (ROOT / "exercises" / name).is_file(), (row.id, name)
        assert framework.checks_of(row.id), f"{row.id}: {row.checks}.py registers no checks"


@pytest.mark.task_wide
def test_the_readme_course_map_lists_each_notebooks_tasks_and_files():
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(\d\d\w*)` \| [^|]* \| ([^|]*) \| ([^|]*) \|$", text, re.M)
    assert rows, "README.md has no course map"
    by_notebook = {name: (files, tasks) for name, files, tasks in rows}
    for notebook, numbers in _tasks_by_notebook().items():
        assert notebook in by_notebook, f"README's course map has no row for {notebook}"
        files, tasks = by_notebook[notebook]
        assert _numbers(tasks) == sorted(numbers), (notebook, tasks)
        wanted = {name for row in manifest.TABLE if row.notebook == notebook for name in row.files}
        assert set(re.findall(r"exercises/([\w.]+)", files)) == wanted, (notebook, files)
    assert f"{manifest.MAX_SCORE:g} points" in text


@pytest.mark.task_wide
def test_notebook_00_lists_every_notebooks_tasks():
    text = (ROOT / "notebooks" / "00_welcome.py").read_text()
    rows = dict(re.findall(r"^# \| (\d\d) \| [^|]* \| ([^|]*) \|$", text, re.M))
    for notebook, numbers in _tasks_by_notebook().items():
        assert _numbers(rows.get(notebook[:2], "")) == sorted(numbers), (notebook, rows.get(notebook[:2]))


@pytest.mark.task_wide
def test_graded_cells_run_exactly_the_manifests_tasks():
    for notebook, numbers in _tasks_by_notebook().items():
        text = (ROOT / "notebooks" / f"{notebook}.py").read_text()
        called = sorted({int(n) for n in re.findall(r'graded\.run\("task(\d+)"', text)})
        assert called == sorted(numbers), (notebook, called)


TOY_SOLUTION = '''\
"""Task 99: a toy task added through the manifest."""


def double(x):
    """Twice x."""
    ### BEGIN SOLUTION Task 99: double
    return 2 * x
    ### END SOLUTION
'''
TOY_CHECKS = '''\
from pagedlab.checks.framework import check, expect_equal


@check("task99", "double doubles", rule="notebook 09, the toy task")
def doubles(run):
    toy = run.load("toy")
    for x in (0, 1, 21, -4):
        expect_equal(toy.double(x), 2 * x, f"double({x})", rule="notebook 09, the toy task")
'''
TOY_HIDDEN = '''\
from pagedlab.checks.framework import check, see


@check("task99", "double on numbers drawn at grading time", rule="notebook 09, the toy task", hidden=True)
def doubles_drawn(run):
    toy = run.load("toy")
    for _ in range(5):
        x = run.rng.randint(-1000, 1000)
        see(f"double({x})", toy.double(x))
'''
TOY_ROW = '''
[[task]]
id = "task99"
title = "a toy task"
part = "D"
notebook = "09_prefix_caching_and_utilization"
section = "the toy task"
files = ["toy.py"]
checks = "toy"
points = 3
time_limit = 30
'''
NOTEBOOK = "notebooks/09_prefix_caching_and_utilization"
# What the recipe's four places are, by hand, and what `pagedlab assign` and `notebook sync` write.
BY_HAND = {"pagedlab/tasks.toml", "solutions/toy.py", "pagedlab/checks/toy.py", "grading/hidden/toy.py",
           f"{NOTEBOOK}.py", "notebooks/00_welcome.py", "README.md"}
GENERATED = {"exercises/toy.py", "exercises/.assign-manifest.json", "pagedlab/checks/expected.json",
             "grading/README.md", f"{NOTEBOOK}.ipynb", "notebooks/00_welcome.ipynb"}
# The task-wide tests, the toy task's cases only where they are one per task or per file.
TASK_WIDE = ("-m", "task_wide", "-k",
             "not (passes_on_solutions or explanation_names or earn_full_marks or many_seeds) or task99 or toy")


def _task_wide_files(course: Path) -> list[str]:
    """The test files holding task-wide tests (collecting only these keeps the run short)."""
    return sorted(str(p.relative_to(course)) for p in (course / "tests").glob("test_*.py")
                  if "pytest.mark.task_wide" in p.read_text())


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} occurs {text.count(old)} times"
    path.write_text(text.replace(old, new))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts}


@pytest.mark.slow
def test_adding_a_task_touches_the_four_places_and_the_task_wide_tests_pass(tmp_path):
    """The README's recipe, step by step, in a copy of the course: a manifest row, the checks
    (and their hidden twin), the solution's fences then `assign`, the notebook's graded cell and
    rows then `notebook sync`. Only those files change, and the suite's task-wide tests pass."""
    from pagedlab.grading.package import repository_files

    course = tmp_path / "course"
    for name in repository_files(ROOT):
        if not name.startswith(("build/", "backups/")):
            (course / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, course / name)
    before = _snapshot(course)
    env = {**os.environ, "PYTHONPATH": str(course), "PAGEDLAB_COURSE": str(course)}
    env.pop(manifest.MANIFEST_ENV, None)

    def run(*args, timeout=600):
        return subprocess.run([sys.executable, *args], cwd=course, env=env, capture_output=True,
                              text=True, timeout=timeout)

    # 1. the manifest row: assign refuses, in one line, until the checks module exists
    with open(course / "pagedlab" / "tasks.toml", "a") as f:
        f.write(TOY_ROW)
    early = run("-m", "pagedlab", "assign")
    assert early.returncode == 2 and "Traceback" not in early.stderr, early.stderr
    assert early.stderr.count("\n") == 1 and "pagedlab/checks/toy.py does not exist" in early.stderr
    # 2. the checks and their hidden twin
    (course / "pagedlab" / "checks" / "toy.py").write_text(TOY_CHECKS)
    (course / "grading" / "hidden" / "toy.py").write_text(TOY_HIDDEN)
    # 3. the fenced solution, then assign
    (course / "solutions" / "toy.py").write_text(TOY_SOLUTION)
    done = run("-m", "pagedlab", "assign")
    assert done.returncode == 0, done.stdout + done.stderr
    stub = (course / "exercises" / "toy.py").read_text()
    assert "YOUR CODE HERE" in stub and "return 2 * x" not in stub
    # 4. the graded cell, the course map's and notebook 00's rows, then sync
    with open(course / f"{NOTEBOOK}.py", "a") as f:
        f.write('\n# %%\npagedlab.graded.run("task99")\n')
    _edit(course / "README.md", "`exercises/buddy.py` | Tasks 11–12 |", "`exercises/buddy.py`, `exercises/toy.py` | Tasks 11–12, 99 |")
    _edit(course / "notebooks" / "00_welcome.py", "utilization study | 11, 12 |", "utilization study | 11, 12, 99 |")
    synced = run("-m", "pagedlab", "notebook", "sync", "00", "09")
    assert synced.returncode == 0, synced.stdout + synced.stderr

    changed = {name for name, data in _snapshot(course).items() if before.get(name) != data}
    assert changed == BY_HAND | GENERATED, f"unexpected: {changed - BY_HAND - GENERATED}, " \
                                           f"untouched: {BY_HAND | GENERATED - changed}"
    graded = run("-m", "pagedlab", "grade", "--impl", "solutions", "--tasks", "99")
    assert "3/3" in graded.stdout and "Task 99 · a toy task" in graded.stdout, graded.stdout + graded.stderr
    suite = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *TASK_WIDE, *_task_wide_files(course),
                timeout=900)
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
    ran = set(re.findall(r"^PASSED (.+?)\s*$", suite.stdout, re.M))
    for toy_case in ("test_check_passes_on_solutions_and_fails_on_exercises[task99/double doubles]",
                     "test_the_explanation_names_the_function_and_the_rule[task99]",
                     "test_solutions_earn_full_marks_and_each_task_needs_only_its_listed_files[toy.py]",
                     "test_the_reference_passes_the_hidden_checks_for_many_seeds[task99]"):
        assert any(name.endswith(toy_case) for name in ran), f"{toy_case} did not run: {sorted(ran)}"
