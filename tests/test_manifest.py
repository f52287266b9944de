"""One task manifest (pagedlab/tasks.toml): the registry, the points, the README's course map,
notebook 00's table and the graded cells all agree with it, and adding a task through it works
end to end (the recipe in the README's instructor section, followed in a temporary copy)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
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
        called = sorted({int(n) for n in re.findall(r'checks\.run\("task(\d+)"', text)})
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


@check("task99", "double doubles", rule="notebook 00, the toy task")
def doubles(run):
    toy = run.load("toy")
    for x in (0, 1, 21, -4):
        expect_equal(toy.double(x), 2 * x, f"double({x})", rule="notebook 00, the toy task")
'''
TOY_ROW = '''
[[task]]
id = "task99"
title = "a toy task"
part = "D"
notebook = "00_welcome"
section = "the toy task"
files = ["toy.py"]
checks = "toy"
points = 3
time_limit = 30
'''


@pytest.mark.slow
def test_adding_a_task_through_the_manifest(tmp_path):
    """The README's recipe: a manifest row, the solution's fences, a checks module (and the
    notebook's graded cell) — then assign generates the stub, the task is graded and tabulated."""
    course = tmp_path / "course"
    for part in ("pagedlab", "solutions", "exercises", "grading"):
        shutil.copytree(ROOT / part, course / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".pagedlab-course", course / ".pagedlab-course")
    (course / "notebooks").mkdir()
    (course / "solutions" / "toy.py").write_text(TOY_SOLUTION)
    (course / "pagedlab" / "checks" / "toy.py").write_text(TOY_CHECKS)
    with open(course / "pagedlab" / "tasks.toml", "a") as f:
        f.write(TOY_ROW)
    env = {**os.environ, "PYTHONPATH": str(course)}
    env.pop("PAGEDLAB_IMPL", None)

    def pagedlab(*args):
        return subprocess.run([sys.executable, "-m", "pagedlab", *args], cwd=course, env=env,
                              capture_output=True, text=True, timeout=600)

    done = pagedlab("assign")
    assert done.returncode == 0, done.stdout + done.stderr
    stub = (course / "exercises" / "toy.py").read_text()
    assert "YOUR CODE HERE" in stub and "return 2 * x" not in stub
    graded = pagedlab("grade", "--impl", "solutions", "--tasks", "99", "--json", str(tmp_path / "s.json"))
    assert "3/3" in graded.stdout and "Task 99 · a toy task" in graded.stdout, graded.stdout + graded.stderr
    stubbed = pagedlab("grade", "--impl", "exercises", "--tasks", "99")
    assert "0/3" in stubbed.stdout and "not implemented yet: Task 99: double" in stubbed.stdout, stubbed.stdout
    listed = subprocess.run([sys.executable, "-c", textwrap.dedent('''
        from pagedlab import manifest
        print(manifest.task("99").label, f"{manifest.MAX_SCORE:g}")
    ''')], cwd=course, env=env, capture_output=True, text=True)
    assert listed.stdout.strip() == f"Task 99 · a toy task {manifest.MAX_SCORE + 3:g}", listed.stderr
