"""The README's add-a-task recipe as code: a toy Task 99 (notebook 09, `exercises/toy.py`) added
to a copy of the course by the four places and nothing else.

Used by tests/test_manifest.py (which then runs the task-wide tests on the copy) and by
tools/rehearse_new_task.py (the instructor's on-demand rehearsal, which can run the whole suite
on it). Each step fails with a RecipeError that says which step and what it saw.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent

TOY_SOLUTION = '''\
"""Task 99: a toy task added through the manifest."""


def double(x):
    """Twice x."""
    ### BEGIN SOLUTION Task 99: double
    return 2 * x
    ### END SOLUTION
'''
TOY_CHECKS = '''\
from pagedlab.drivers.record import expect_equal, see
from pagedlab.spec.catalog import check, scenario_driver


@check("task99", "double doubles", rule="notebook 09, the toy task")
def doubles(run):
    toy = run.load("toy")
    for x in (0, 1, 21, -4):
        expect_equal(toy.double(x), 2 * x, f"double({x})", rule="notebook 09, the toy task")


@scenario_driver
def doubles_drawn(run):
    """The hidden check's driver: it gets the numbers the grader drew, as data."""
    toy = run.load("toy")
    for x in run.scenario["numbers"]:
        see(f"double({x})", toy.double(x))
'''
TOY_HIDDEN = '''\
import random

from pagedlab.spec.catalog import hidden_scenario
from pagedlab.drivers.toy import doubles_drawn


@hidden_scenario("task99", "double on numbers drawn at grading time", rule="notebook 09, the toy task",
                 driver=doubles_drawn)
def numbers(seed):
    rng = random.Random(seed)
    return {"numbers": [rng.randint(-1000, 1000) for _ in range(5)]}
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

# The recipe's four places, edited by hand, and what `pagedlab assign` and `notebook sync` write.
BY_HAND = {"pagedlab/spec/tasks.toml", "solutions/toy.py", "pagedlab/drivers/toy.py", "grading/hidden/toy.py",
           f"{NOTEBOOK}.py", "notebooks/00_welcome.py", "README.md"}
GENERATED = {"exercises/toy.py", "exercises/.assign-manifest.json", "pagedlab/grader/expected.json",
             "grading/README.md", f"{NOTEBOOK}.ipynb", "notebooks/00_welcome.ipynb"}

# The task-wide tests but the integration ones (minutes each: the whole suite runs them); of the
# tests with one case per task or per file, only the toy's (the others ran on the checkout).
TASK_WIDE_RUN = ("-q", "-rA", "-m", "task_wide and not integration", "-k",
                 "not (passes_on_solutions or explanation_names or earn_full_marks or many_seeds"
                 " or each_exercise_file_loads) or task99 or toy", "tests")
# The toy's cases of those per-task tests: the task-wide run must have run each of them.
TOY_CASES = ("test_check_passes_on_solutions_and_fails_on_exercises[task99/double doubles]",
             "test_the_explanation_names_the_function_and_the_rule[task99]",
             "test_solutions_earn_full_marks_and_each_task_needs_only_its_listed_files[toy.py]",
             "test_the_reference_passes_the_hidden_checks_for_many_seeds[task99]")


class RecipeError(Exception):
    """A step of the recipe did not do what the README says it does."""


def copy_course(dest: Path, root: Path = ROOT) -> Path:
    """The checkout's files (tracked and untracked, not ignored) in `dest`, committed in a git
    repository of their own, as a fresh clone has them (tests that list the repository's files
    need git)."""
    from pagedlab.grader.package import repository_files

    for name in repository_files(root):
        if not name.startswith(("build/", "backups/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "the course before the toy task")
    return dest


def _git(course: Path, *args: str) -> str:
    who = ("-c", "user.name=rehearse-new-task", "-c", "user.email=rehearse@pagedlab.invalid")
    return subprocess.run(["git", *who, *args], cwd=course, check=True, capture_output=True,
                          text=True).stdout


def course_env(course: Path) -> dict[str, str]:
    """The environment that makes this venv's Python run the copy's pagedlab, not the checkout's."""
    env = {**os.environ, "PYTHONPATH": str(course), "PAGEDLAB_COURSE": str(course)}
    env.pop(manifest.MANIFEST_ENV, None)  # a test's own manifest must not replace the copy's
    return env


def run_in(course: Path, *args: str, timeout: float | None = 600, env: dict | None = None,
           capture: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=course, env=env or course_env(course),
                          capture_output=capture, text=True, timeout=timeout)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise RecipeError(f"step 4: {path.name}: {old!r} occurs {text.count(old)} times, not once")
    path.write_text(text.replace(old, new))


def apply_recipe(course: Path) -> None:
    """The README's four steps, in its order, each run as written."""
    # 1. the manifest row: assign refuses, in one line, until the checks module exists
    with open(course / "pagedlab" / "spec" / "tasks.toml", "a") as f:
        f.write(TOY_ROW)
    early = run_in(course, "-m", "pagedlab", "assign")
    if not (early.returncode == 2 and "Traceback" not in early.stderr and early.stderr.count("\n") == 1
            and "pagedlab/drivers/toy.py does not exist" in early.stderr):
        raise RecipeError("step 1: `pagedlab assign` before the checks module exists should refuse in "
                          f"one line naming pagedlab/drivers/toy.py; it exited {early.returncode}:\n"
                          + early.stderr[-2000:])
    # 2. the checks and their hidden twin
    (course / "pagedlab" / "drivers" / "toy.py").write_text(TOY_CHECKS)
    (course / "grading" / "hidden" / "toy.py").write_text(TOY_HIDDEN)
    # 3. the fenced solution, then assign
    (course / "solutions" / "toy.py").write_text(TOY_SOLUTION)
    done = run_in(course, "-m", "pagedlab", "assign")
    if done.returncode != 0:
        raise RecipeError(f"step 3: `pagedlab assign` exited {done.returncode}:\n{done.stdout}{done.stderr}")
    stub = (course / "exercises" / "toy.py").read_text()
    if "YOUR CODE HERE" not in stub or "return 2 * x" in stub:
        raise RecipeError(f"step 3: exercises/toy.py is not the stub of the solution:\n{stub}")
    # 4. the graded cell, the course map's and notebook 00's rows, then sync
    with open(course / f"{NOTEBOOK}.py", "a") as f:
        f.write('\n# %%\npagedlab.graded.run("task99")\n')
    _edit(course / "README.md", "`exercises/buddy.py` | Tasks 11–12 |",
          "`exercises/buddy.py`, `exercises/toy.py` | Tasks 11–12, 99 |")
    _edit(course / "notebooks" / "00_welcome.py", "utilization study | 11, 12 |", "utilization study | 11, 12, 99 |")
    synced = run_in(course, "-m", "pagedlab", "notebook", "sync", "00", "09")
    if synced.returncode != 0:
        raise RecipeError(f"step 4: `pagedlab notebook sync 00 09` exited {synced.returncode}:\n"
                          f"{synced.stdout}{synced.stderr}")


def changed_files(course: Path) -> set[str]:
    """Every file added, changed or removed since the copy's commit."""
    lines = _git(course, "status", "--porcelain", "--untracked-files=all").splitlines()
    return {line[3:].strip('"') for line in lines}


def check_only_the_four_places_changed(course: Path) -> None:
    changed = changed_files(course)
    wanted = BY_HAND | GENERATED
    if changed != wanted:
        raise RecipeError(f"the recipe changed files beyond its four places: {sorted(changed - wanted)}; "
                          f"left untouched: {sorted(wanted - changed)}")


def commit_recipe(course: Path) -> None:
    """The toy task as the copy's second commit (`git show --stat` lists the four places)."""
    _git(course, "add", "-A")
    _git(course, "commit", "-q", "-m", "Task 99, a toy task, by the README's recipe")


def grade_toy(course: Path) -> str:
    graded = run_in(course, "-m", "pagedlab", "grade", "--impl", "solutions", "--tasks", "99")
    if "3/3" not in graded.stdout or "Task 99 · a toy task" not in graded.stdout:
        raise RecipeError(f"the solutions do not earn Task 99's 3 points:\n{graded.stdout}{graded.stderr}")
    return graded.stdout


def pytest_in_copy(args: list[str]) -> list[str]:
    """pytest's arguments in the copy, with the plugin that records the collection on request."""
    return ["-m", "pytest", "-p", "no:cacheprovider", "-p", "record_collection", *args]


def plugin_env(course: Path) -> dict[str, str]:
    """As `./course test` runs pytest (the reference implementation), with the plugin importable;
    PAGEDLAB_RECORD_COLLECTION, when set, passes through."""
    env = course_env(course)
    env["PYTHONPATH"] = os.pathsep.join([str(course), str(course / "tests")])
    env["PAGEDLAB_IMPL"] = "solutions"
    return env


def check_toy_cases_ran(pytest_stdout: str) -> None:
    """The `-rA` report of the task-wide run names each toy case of the per-task tests as passed."""
    passed = [line for line in pytest_stdout.splitlines() if line.startswith("PASSED ")]
    missing = [case for case in TOY_CASES if not any(line.rstrip().endswith(case) for line in passed)]
    if missing:
        raise RecipeError(f"the task-wide run did not pass the toy task's own cases: {missing}")


def function_of(nodeid: str) -> str:
    """tests/test_x.py::test_y[case] -> tests/test_x.py::test_y (one test, all its cases)."""
    return nodeid.split("[", 1)[0]


def unmarked_tests_changed_by_the_toy(before: dict[str, bool], after: dict[str, bool]) -> list[str]:
    """Test functions whose collected ids differ with the toy task but are not marked task_wide."""
    changed = set(before).symmetric_difference(after)
    return sorted({function_of(nodeid) for nodeid in changed if not after.get(nodeid, before.get(nodeid))})
