"""One task manifest (pagedlab/spec/tasks.toml): the registry, the points, the README's course map,
notebook 00's table and the graded cells all agree with it, and adding a task through it works
end to end (the recipe in the README's instructor section, followed in a temporary copy)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import new_task_recipe as recipe
import pytest
from record_collection import RECORD_ENV

from pagedlab.grader import registry
from pagedlab.spec import manifest

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
        assert (ROOT / "pagedlab" / "drivers" / f"{row.checks}.py").is_file(), row.id
        assert (ROOT / "notebooks" / f"{row.notebook}.py").is_file(), row.id
        for name in row.files:
            assert (ROOT / "solutions" / name).is_file() and (ROOT / "exercises" / name).is_file(), (row.id, name)
        assert registry.checks_of(row.id), f"{row.id}: {row.checks}.py registers no checks"


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
def test_every_notebook_has_its_row_in_the_course_map_and_notebook_00():
    """Notebooks outside the manifest too (02c, the C track, grades Tasks 1-5 in C): a row each,
    with the tasks its graded cells run, and the exercise file it has students edit."""
    readme = {name: (files, tasks) for name, files, tasks in re.findall(
        r"^\| `(\d\d\w*)` \| [^|]* \| ([^|]*) \| ([^|]*) \|$", (ROOT / "README.md").read_text(), re.M)}
    welcome = dict(re.findall(r"^# \| (\d\dc?) \| [^|]* \| ([^|]*) \|$",
                              (ROOT / "notebooks" / "00_welcome.py").read_text(), re.M))
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.py")):
        graded = sorted({int(n) for n in re.findall(r'^(?:pagedlab\.)?graded\.run\("task(\d+)"', path.read_text(), re.M)})
        assert path.stem in readme, f"README's course map has no row for {path.stem}"
        assert path.stem.split("_")[0] in welcome, f"notebook 00's table has no row for {path.stem}"
        assert _numbers(readme[path.stem][1]) == graded, (path.stem, readme[path.stem][1])
        assert _numbers(welcome[path.stem.split("_")[0]]) == graded, (path.stem, welcome[path.stem.split("_")[0]])
        for name in re.findall(r"exercises/([\w.]+)", readme[path.stem][0]):
            assert (ROOT / "exercises" / name).is_file(), (path.stem, name)


def test_notebook_00_and_the_readme_run_pagedlab_from_the_venv():
    """Outside an activated venv there is no `pagedlab` command: the course's own is .venv/bin/pagedlab."""
    for path in (ROOT / "README.md", ROOT / "notebooks" / "00_welcome.py"):
        blocks = re.findall(r"```\w*\n(.*?)```", path.read_text(), re.S)
        commands = [line.strip("# ").strip() for block in blocks for line in block.splitlines()]
        bare = [c for c in commands if re.match(r"pagedlab (grade|doctor|notebook|assign|release)\b", c)]
        assert not bare, f"{path.name}: {bare}"


@pytest.mark.task_wide
def test_graded_cells_run_exactly_the_manifests_tasks():
    for notebook, numbers in _tasks_by_notebook().items():
        text = (ROOT / "notebooks" / f"{notebook}.py").read_text()
        called = sorted({int(n) for n in re.findall(r'graded\.run\("task(\d+)"', text)})
        assert called == sorted(numbers), (notebook, called)


# ---- adding a task: tools/rehearse_new_task.py follows the recipe (tests/new_task_recipe.py) with
# a toy Task 99 in a copy of the course, then runs the task-wide tests there.


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The tool's default run, with the copy kept and its pytest's collection recorded."""
    folder = tmp_path_factory.mktemp("toy")
    record = folder / "collected-with-toy.json"
    env = {**os.environ, RECORD_ENV: str(record)}
    env.pop(manifest.MANIFEST_ENV, None)
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "rehearse_new_task.py"), "--keep", str(folder / "course")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    return done, record


@pytest.mark.xdist_group("new-task-rehearsal")  # both tests share one rehearsal (conftest.py)
@pytest.mark.slow
def test_adding_a_task_touches_the_four_places_and_the_task_wide_tests_pass(rehearsal):
    """The README's recipe, step by step, in a copy of the course: a manifest row, the checks
    (and their hidden twin), the solution's fences then `assign`, the notebook's graded cell and
    rows then `notebook sync`. Only those files change, Task 99 grades, and the suite's
    task-wide tests pass, the toy's own cases among them."""
    done, _ = rehearsal
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "==> only the four places changed" in done.stdout and "3/3" in done.stdout
    assert "==> the task-wide tests pass with Task 99, its own cases included" in done.stdout


def _collection_of_this_session(session: pytest.Session) -> dict[str, bool] | None:
    """The checkout's tests/ as this session collected them, if it collected all of them with
    nothing deselected (a CI run: every xdist worker collects the whole suite), else None."""
    config = session.config
    narrowed = any(config.getoption(name, None) for name in
                   ("keyword", "markexpr", "deselect", "ignore", "ignore_glob", "lf", "stepwise"))
    here = config.invocation_params.dir
    whole = any((here / arg.split("::")[0]).resolve() in (ROOT, ROOT / "tests") for arg in config.args)
    if narrowed or not whole:
        return None
    # Under `--dist loadgroup` a grouped test's id ends in "@group"; the copy's record has none.
    return {re.sub(r"@[^\[\]/:]+$", "", item.nodeid): item.get_closest_marker("task_wide") is not None
            for item in session.items if item.nodeid.startswith("tests/")}


def _collection_of_the_checkout(tmp_path: Path) -> dict[str, bool]:
    record = tmp_path / "collected.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), RECORD_ENV: str(record)}
    env.pop(manifest.MANIFEST_ENV, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "record_collection",
                           "--collect-only", "-q", "tests"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(record.read_text())


@pytest.mark.xdist_group("new-task-rehearsal")  # both tests share one rehearsal (conftest.py)
@pytest.mark.slow
def test_every_test_whose_cases_change_with_a_new_task_is_marked_task_wide(rehearsal, request, tmp_path):
    """A test parametrized by the task list, the totals or the submission files gains a case with
    the toy task; the rehearsal runs only task-wide tests, so each such test must carry the mark."""
    done, record = rehearsal
    assert record.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    with_toy = json.loads(record.read_text())
    without = _collection_of_this_session(request.session) or _collection_of_the_checkout(tmp_path)
    assert set(with_toy) - set(without), "the toy task added no test case: the comparison sees nothing"
    unmarked = recipe.unmarked_tests_changed_by_the_toy(without, with_toy)
    assert not unmarked, f"these tests' cases change with a new task; mark them @pytest.mark.task_wide: {unmarked}"
