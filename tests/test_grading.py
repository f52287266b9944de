"""The grading machinery (`pagedlab grade`), driven by fake checks so it needs no torch.

tests/submissions/fake_checks.py registers checks for tasks 1-2 that call functions of the
submission's memory_manager.py; each test writes those functions to pass, fail, crash or hang
and asserts what a student and Gradescope would see. The real checks are graded end to end in
tests/test_grading_real.py.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pagedlab import cli
from pagedlab.grader.cli import grade
from pagedlab.grader.notebooks import NotebookOutcome, notebook_paths, run_notebook
from pagedlab.grader.pipeline import CheckOutcome, TaskOutcome
from pagedlab.sandbox.policy import WALL_FACTOR
from pagedlab.spec import points

FAKE_CHECKS = Path(__file__).parent / "submissions" / "fake_checks.py"
SCALE = 0.1  # task1/task2 limits of 30 s become 3 s

GOOD = {
    "t1_a": "return 1",
    "t1_b": "return 2",
    "t2": "return 3",
}


@pytest.fixture(autouse=True)
def fake_checks(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(FAKE_CHECKS))
    monkeypatch.setenv("PAGEDLAB_GRADE_TIME_SCALE", str(SCALE))
    monkeypatch.setenv("PAGEDLAB_REFERENCE", str(submission(tmp_path_factory.mktemp("reference"))))
    monkeypatch.setattr("pagedlab.grader.registry._checks_of_override", None)
    monkeypatch.setattr("pagedlab.grader.registry._loaded", set())
    monkeypatch.setattr("pagedlab.spec.catalog._REGISTRY", {})


def submission(folder: Path, **bodies) -> Path:
    """A memory_manager.py whose functions have the given bodies (default: correct)."""
    folder.mkdir(parents=True, exist_ok=True)
    code = ["import ctypes, os, subprocess, sys, time", ""]
    for name, body in {**GOOD, **bodies}.items():
        code.append(f"def {name}():")
        code.append(textwrap.indent(textwrap.dedent(body), "    "))
        code.append("")
    (folder / "memory_manager.py").write_text("\n".join(code))
    return folder


def quiet_grade(impl, **kwargs) -> dict:
    return grade(str(impl), echo=lambda *a: None, **kwargs)


def by_number(results: dict) -> dict:
    return {t["number"]: t for t in results["tests"]}


def assert_gradescope_shape(results: dict) -> None:
    """The fields Gradescope reads, with the types it expects."""
    json.loads(json.dumps(results))  # plain JSON all the way down
    assert isinstance(results["score"], (int, float))
    assert isinstance(results["execution_time"], int)
    assert isinstance(results["output"], str)
    for t in results["tests"]:
        assert set(t) >= {"name", "number", "score", "max_score", "status", "output", "visibility"}
        assert t["status"] in ("passed", "failed")
        assert t["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
        assert 0 <= t["score"] <= t["max_score"]
        assert (t["status"] == "passed") == (t["score"] == t["max_score"]) or t["max_score"] == 0
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]))


def test_correct_code_earns_each_tasks_points_and_a_wrong_answer_fails_only_its_task(tmp_path):
    results = quiet_grade(submission(tmp_path, t2="return 4"), tasks=["task1", "task2"])
    assert_gradescope_shape(results)
    tests = by_number(results)
    assert (tests["1"]["score"], tests["1"]["status"]) == (points.BY_TASK["task1"].points, "passed")
    assert (tests["2"]["score"], tests["2"]["status"]) == (0, "failed")
    assert results["score"] == points.BY_TASK["task1"].points
    # The student sees which check, the rule-style message, what was expected and what they returned.
    out = tests["2"]["output"]
    assert "✗ t2 returns 3" in out and "expected: 3" in out and "yours:    4" in out
    assert "✓ t1_a returns 1" in tests["1"]["output"]


def test_not_implemented_and_partial_work_score_zero_all_or_nothing(tmp_path):
    results = quiet_grade(submission(tmp_path, t1_b="raise NotImplementedError('Task 1: t1_b')",
                                     t2="raise NotImplementedError('Task 2')"), tasks=["1", "2"])
    tests = by_number(results)
    assert results["score"] == 0
    assert "1 of 2 checks passed" in tests["1"]["output"]
    assert "not implemented yet: Task 1: t1_b" in tests["1"]["output"]


def test_a_segfault_fails_its_task_only_and_says_where(tmp_path):
    results = quiet_grade(submission(tmp_path, t1_b="ctypes.string_at(0)"), tasks=["1", "2"])
    assert_gradescope_shape(results)
    tests = by_number(results)
    assert tests["2"]["status"] == "passed"
    out = tests["1"]["output"]
    assert tests["1"]["score"] == 0
    assert "SIGSEGV" in out and "✗ t1_b returns 2" in out
    assert "✓ t1_a returns 1" in out  # the check before the crash still reports
    assert 'File "memory_manager.py", line 7 in t1_b' in out  # faulthandler points at the line


def test_an_infinite_loop_is_cut_at_the_time_limit_and_fails_its_task_only(tmp_path):
    limit = points.BY_TASK["task2"].time_limit * SCALE
    began = time.perf_counter()
    results = quiet_grade(submission(tmp_path, t2="while True:\n    pass"), tasks=["1", "2"])
    elapsed = time.perf_counter() - began
    tests = by_number(results)
    assert tests["1"]["status"] == "passed" and tests["2"]["score"] == 0
    assert f"timed out after {limit:.0f} s" in tests["2"]["output"] and "✗ t2 returns 3" in tests["2"]["output"]
    assert "line 12 in t2" in tests["2"]["output"] or "in t2" in tests["2"]["output"]
    # The limit is CPU time; a loaded machine may stretch it on the clock, up to WALL_FACTOR times.
    assert elapsed < (limit + 5) * WALL_FACTOR + 10, f"grading took {elapsed:.1f}s with a {limit:.0f}s limit"


def test_a_hung_task_leaves_no_process_behind(tmp_path):
    pid_file = tmp_path / "child.pid"
    # Hangs asleep: the cut is by wall time, so this is the same hang as a spin without its 3 CPU-s
    # (the spinning loop is the test above).
    body = f"""
    p = subprocess.Popen(["sleep", "300"])
    open({str(pid_file)!r}, "w").write(str(p.pid))
    while True:
        time.sleep(1)
    """
    results = quiet_grade(submission(tmp_path / "sub", t2=body), tasks=["2"])
    assert by_number(results)["2"]["status"] == "failed"
    pid = int(pid_file.read_text())
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # A killed child stays a zombie until reaped by init; /proc tells the two apart.
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
        except OSError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the task's subprocess {pid} survived the time limit")


@pytest.mark.parametrize("body, says", [
    ("sys.exit(3)", "your code called sys.exit(3)"),
    ("os._exit(0)", "exited with code 0 in the middle of the check"),
    ("import no_such_module_xyz", "ModuleNotFoundError"),
    ("print('x' * 10_000_000)\nreturn 3", None),  # a flood of output is not a failure
])
def test_exits_imports_and_output_floods_are_contained(tmp_path, body, says):
    results = quiet_grade(submission(tmp_path, t2=body), tasks=["1", "2"])
    tests = by_number(results)
    assert tests["1"]["status"] == "passed"
    if says is None:
        assert tests["2"]["status"] == "passed"
    else:
        assert tests["2"]["status"] == "failed" and says in tests["2"]["output"]


def test_a_syntax_error_fails_the_tasks_of_that_file_with_the_compilers_message(tmp_path):
    folder = submission(tmp_path)
    path = folder / "memory_manager.py"
    path.write_text(path.read_text().replace("return 3", "return 3 +"))
    results = quiet_grade(folder, tasks=["1", "2"])
    assert_gradescope_shape(results)
    for t in results["tests"]:
        assert t["status"] == "failed" and "SyntaxError" in t["output"]


def test_grader_problems_score_zero_and_blame_the_grader_not_the_student(tmp_path):
    results = quiet_grade(submission(tmp_path), tasks=["3", "4", "5"])
    assert_gradescope_shape(results)
    assert results["score"] == 0
    out = by_number(results)
    assert "task3 has no checks" in out["3"]["output"]
    assert "no_such_check_module.py is not installed" in out["4"]["output"]
    assert "simulated syntax error in a check module" in out["5"]["output"]
    assert all("autograder problem, not your code" in t["output"] for t in results["tests"])


def _register_in_the_grader_only(name: str):
    """A check of task2 in this process's registry and nowhere else: the plugin the child loads
    does not register it (as Task 10's GPU check exists only where the grader sees a GPU)."""
    import sys

    from pagedlab.grader import registry
    from pagedlab.spec import catalog

    registry.load_plugin()
    catalog.check("task2", name)(sys.modules["pagedlab_grading_plugin"].t2_twice)


def test_the_child_runs_the_graders_plan_even_where_its_own_registry_differs(tmp_path):
    _register_in_the_grader_only("t2 returns 3, twice")
    good = by_number(quiet_grade(submission(tmp_path / "good"), tasks=["2"]))["2"]
    assert good["status"] == "passed", good["output"]
    assert "✓ t2 returns 3, twice" in good["output"]
    wrong = by_number(quiet_grade(submission(tmp_path / "wrong", t2="return 4"), tasks=["2"]))["2"]
    assert wrong["status"] == "failed" and "autograder problem" not in wrong["output"], wrong["output"]
    assert "✗ t2 returns 3, twice" in wrong["output"]


def test_a_plan_the_child_cannot_load_is_the_graders_problem_and_a_lost_record_the_students(tmp_path):
    from pagedlab.grader import pipeline as runner

    impl = str(submission(tmp_path / "impl"))
    plan = [{"key": "task2/ghost", "function": "pagedlab_grading_plugin:no_such_driver", "engines": {}}]
    records, problems, grader_problem, _ = runner._run_children("task2", impl, plan, limit=20, env=None,
                                                                policy=runner.child_policy())
    assert "ended before its checks started" in grader_problem and "without the submission too" in grader_problem
    assert not records and not problems  # nothing counted against the student
    # A submission that wipes its record and exits looks the same from outside: the probe starts
    # (no submission file in it), so it stays the submission's failure.
    wipe = ("fd = int(os.environ['PAGEDLAB_RECORD_FD'])\nos.ftruncate(fd, 0)\nos.lseek(fd, 0, 0)\n"
            "os._exit(3)")
    results = quiet_grade(submission(tmp_path / "wipe", t1_a=wipe), tasks=["1"])
    out = by_number(results)["1"]
    assert out["status"] == "failed" and "autograder problem" not in out["output"], out["output"]
    assert "ended before its checks started" in out["output"], out["output"]


def test_a_missing_file_fails_the_tasks_that_need_it(tmp_path):
    (tmp_path / "prefix_cache.py").write_text("")
    results = quiet_grade(tmp_path, tasks=["1", "2"])
    for t in results["tests"]:
        assert t["status"] == "failed"
        assert "memory_manager.py is missing from the submission" in t["output"]


def test_partial_credit_when_the_table_asks_for_it():
    row = replace(points.BY_TASK["task1"], points=9, partial=True)
    outcome = TaskOutcome(row, checks=[CheckOutcome("a", True), CheckOutcome("b", False),
                                       CheckOutcome("c", True)], started=True, finished=True)
    assert outcome.score == 6
    assert TaskOutcome(points.BY_TASK["task1"], checks=outcome.checks).score == 0
    crashed = TaskOutcome(row, checks=[CheckOutcome("a", True), CheckOutcome("b", None)], problem="SIGSEGV")
    assert crashed.score == 4.5  # the check that crashed counts as failed


def test_gradescope_mode_finds_nested_files_and_writes_results_json(tmp_path, monkeypatch, capsys):
    root = tmp_path / "autograder"
    submission(root / "submission" / "my-hw" / "exercises", t2="return 0")
    (root / "submission" / "__MACOSX").mkdir()
    (root / "submission" / "__MACOSX" / "memory_manager.py").write_text("garbage(")
    monkeypatch.setenv("PAGEDLAB_AUTOGRADER_ROOT", str(root))
    assert cli.main(["grade", "--gradescope", "--tasks", "task1,task2"]) == 0
    results = json.loads((root / "results" / "results.json").read_text())
    assert_gradescope_shape(results)
    assert [t["status"] for t in results["tests"]] == ["passed", "failed"]
    assert "my-hw/exercises/memory_manager.py" in results["output"]
    assert "total" in capsys.readouterr().out


def test_gradescope_mode_without_a_submission_still_writes_results_json(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_AUTOGRADER_ROOT", str(tmp_path))
    assert cli.main(["grade", "--gradescope", "--tasks", "1"]) == 2
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 0 and "No submission to grade" in results["output"]


@pytest.mark.task_wide  # its unknown id must stay unknown when a task is added
def test_unknown_tasks_are_refused(capsys):
    from pagedlab.spec import manifest

    unknown = f"task{max(row.number for row in manifest.TABLE) + 1}"  # not a new task's id (a toy Task 99)
    assert cli.main(["grade", "--tasks", unknown]) == 2
    assert f"unknown task '{unknown}'" in capsys.readouterr().err


@pytest.mark.task_wide
def test_points_table_covers_every_task_once():
    from pagedlab.spec.manifest import TASKS

    assert [row.task for row in points.TABLE] == list(TASKS)
    from pagedlab.spec import manifest

    # The total is the manifest file's, read here without the manifest module's parsing.
    with open(os.environ.get(manifest.MANIFEST_ENV) or manifest.PATH, "rb") as f:
        rows = manifest.tomllib.load(f)["task"]
    assert points.MAX_SCORE == sum(row["points"] for row in rows) > 0
    assert [r.task for r in points.select(["3", "task1", "1"])] == ["task1", "task3"]


def test_score_table_is_printed(tmp_path, capsys):
    grade(str(submission(tmp_path)), tasks=["1", "2"])
    out = capsys.readouterr().out
    assert "task1  8/8    2/2" in out and "total  22/22" in out


# ---------------------------------------------------------------- --notebooks


def _notebook(path: Path, *sources: str) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# a heading cell nbval does not run"}]
    cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
              for source in sources]
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def test_each_notebook_is_run_under_nbval_with_the_submission(tmp_path):
    good = _notebook(tmp_path / "01_good.ipynb", "import os\nassert os.environ['PAGEDLAB_IMPL'] == 'solutions'")
    # The error's text is the notebook's (the submission's code) writing: a bell and a carriage
    # return must reach Gradescope escaped, not redraw a line.
    bad = _notebook(tmp_path / "02_bad.ipynb", "x = 1", "\n# the second code cell\nraise ValueError('cell 2 is broken\\x07\\rfake')",
                    "print(x)", "raise KeyError('later')")
    (tmp_path / "README.ipynb").write_text("{}")  # not a numbered notebook
    assert notebook_paths(tmp_path) == [good, bad]
    assert notebook_paths(tmp_path / "missing") == []
    ok = run_notebook(good, "solutions")
    assert ok.passed, ok.output
    broken = run_notebook(bad, "solutions")
    assert not broken.passed
    # The first failing cell by number and first line, then the last line of its error, escaped.
    assert broken.reason == "code cell 2 `# the second code cell`: ValueError: cell 2 is broken\\x07\\rfake", broken.output
    assert broken.output.splitlines()[0] == broken.reason
    assert "code cell 4 `raise KeyError('later')`: KeyError: 'later'" in broken.output  # a later failure, listed
    assert "code cell 3" not in broken.output  # it ran
    assert "\x1b[" not in broken.output and "\r" not in broken.output and "\x07" not in broken.output
    empty = tmp_path / "03_empty.ipynb"
    empty.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert run_notebook(empty, "solutions").passed


def test_a_notebook_out_of_time_names_the_cell_it_was_in(tmp_path, monkeypatch):
    """A notebook stuck in a cell is ended at its limit (CPU time, or the clock when it sleeps)
    and the entry says which cell held it. The limit is cut to 6 s (300 s x 0.02)."""
    monkeypatch.setenv("PAGEDLAB_GRADE_TIME_SCALE", "0.02")
    stuck = _notebook(tmp_path / "03_stuck.ipynb", "x = 1", "import time  # waits for input that never comes\ntime.sleep(600)")
    out = run_notebook(stuck, "solutions")
    assert not out.passed
    assert out.reason == "timed out after 6 s in code cell 2 `import time  # waits for input that never comes`", out.output


def test_the_c_tracks_notebook_runs_only_for_a_submission_with_a_c_file(tmp_path):
    """02c (HW3 in C) runs on llm_memory.c: graded with --notebooks when the submission has one,
    left out for a Python-only submission, whose 02c could only fail on a file it never had."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    numbered = [_notebook(notebooks / name, "pass") for name in ("02_block_table.ipynb", "03_intrusive_list.ipynb")]
    in_c = _notebook(notebooks / "02c_hw3_in_c.ipynb", "pass")
    python_only, with_c = tmp_path / "python_only", tmp_path / "with_c"
    for sub in (python_only, with_c):
        sub.mkdir()
        (sub / "memory_manager.py").write_text("")
    (with_c / "llm_memory.c").write_text("")
    assert notebook_paths(notebooks) == numbered
    assert notebook_paths(notebooks, python_only) == numbered
    assert notebook_paths(notebooks, with_c) == [numbered[0], in_c, numbered[1]]


def test_notebook_entries_in_results_json(tmp_path, monkeypatch):
    """Each notebook gets an entry worth no points, passed or failed. Its outcome is faked here:
    that run_notebook really runs nbval is the test above (a Jupyter kernel costs seconds)."""
    from pagedlab.grader import cli as grade_cli

    folder = tmp_path / "notebooks"
    folder.mkdir()
    for name in ("01_a.ipynb", "02_b.ipynb"):  # each runs the submission's Part A: --tasks 1 takes both
        _notebook(folder / name, 'mm = pagedlab.load("memory_manager")')
    monkeypatch.setattr(grade_cli, "notebook_paths", lambda _folder=None, _submission=None: sorted(folder.glob("*.ipynb")))
    ran = []

    def fake_run(path, impl, sandbox=None, **_roots):
        ran.append((path.name, impl))
        return NotebookOutcome(path.name, path.name.startswith("01"), "cell 3 failed", 1.0)

    monkeypatch.setattr(grade_cli, "run_notebook", fake_run)
    sub = submission(tmp_path / "sub")
    results = quiet_grade(sub, tasks=["1"], notebooks=True)
    assert_gradescope_shape(results)
    assert [name for name, _ in ran] == ["01_a.ipynb", "02_b.ipynb"]
    passed, failed = results["tests"][-2:]
    assert passed["name"].startswith("Notebook 01_a.ipynb") and passed["status"] == "passed"
    assert failed["name"].startswith("Notebook 02_b.ipynb") and failed["status"] == "failed"
    assert passed["max_score"] == failed["max_score"] == 0
    assert results["score"] == points.BY_TASK["task1"].points  # a failed notebook costs nothing


def _graded_notebook_run(tmp_path, monkeypatch, *sources: str, **bodies) -> tuple[dict, list[dict]]:
    """`grade --tasks 1 --notebooks` (fake checks) of a submission with `bodies`, on a notebook of
    Task 1 (02_block_table.ipynb) made of `sources`; (results, the verdicts root wrote)."""
    from pagedlab import verdicts
    from pagedlab.grader import cli as grade_cli

    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "02_block_table.ipynb", *sources)
    _notebook(folder / "09_prefix_caching_and_utilization.ipynb", "raise SystemExit('--tasks 1 never runs me')")
    monkeypatch.setattr(grade_cli, "notebook_paths", lambda _folder=None, _submission=None: sorted(folder.glob("*.ipynb")))
    written = []
    real_write = verdicts.write
    monkeypatch.setattr(verdicts, "write", lambda path, found, **kw: (written.append(found), real_write(path, found, **kw))[1])
    return quiet_grade(submission(tmp_path / "sub", **bodies), tasks=["1"], notebooks=True), written


def test_a_notebooks_graded_cell_shows_roots_verdict_and_fails_at_that_cell(tmp_path, monkeypatch):
    """The notebook's graded cell and its `require` read the verdict root made before the notebook
    ran (the kernel judges nothing: under a sandbox user it may read no expected value). What the
    kernel gets names each check, its mark, rule and gist, never a value; the failing notebook
    names its cell, the cell's first line and the last line of the error."""
    results, written = _graded_notebook_run(
        tmp_path, monkeypatch, "import pagedlab", 'pagedlab.graded.run("task1")',
        'pagedlab.graded.require("task1")\nprint("the demo ran")', t1_b="return 'planted-value-71'")
    task1, notebook = results["tests"][0], results["tests"][-1]
    assert [t["name"] for t in results["tests"]][1:] == ["Notebook 02_block_table.ipynb runs top to bottom (nbval)"]
    assert "planted-value-71" in task1["output"]  # root's report has the values...
    (found,) = written
    (verdict,) = found.values()
    assert "planted-value-71" not in json.dumps(found)  # ...the kernel's verdict does not
    assert [(c["name"], c["passed"], c["rule"]) for c in verdict["checks"]] == [
        ("t1_a returns 1", True, ""), ("t1_b returns 2", False, "fake rule B")]
    assert verdict["checks"][1]["gist"]
    assert notebook["status"] == "failed"
    first, *rest = notebook["output"].splitlines()
    assert first.startswith('code cell 2 `pagedlab.graded.run("task1")`: CheckFailure: 1 of 2 checks did not pass '
                            "for Task 1"), notebook["output"]
    assert any(line.startswith('  code cell 3 `pagedlab.graded.require("task1")`: CheckFailure: This cell runs '
                               "your code for a demo and needs Task 1") for line in rest), notebook["output"]
    assert f"✗ failed ({notebook_seconds(results)}s): {first}" in results["output"]  # the score table says why


def notebook_seconds(results: dict) -> str:
    line = next(line for line in results["output"].splitlines() if line.startswith("notebook 02_block_table"))
    return line.split("(", 1)[1].split("s)", 1)[0]


def test_a_graded_cell_skipped_in_the_kernel_still_fails_its_notebook(tmp_path, monkeypatch):
    """Whatever runs in the kernel (the submission's code, once a demo imports it) may replace
    `pagedlab.graded.run`: the graded cell then raises nothing, and nbval passes. Root's verdict
    stands: the notebook fails at that cell."""
    results, _ = _graded_notebook_run(
        tmp_path, monkeypatch, "import pagedlab.graded\npagedlab.graded.run = lambda *a, **k: None",
        'pagedlab.graded.run("task1")', t1_b="return 0")
    notebook = results["tests"][-1]
    assert notebook["status"] == "failed"
    assert notebook["output"].splitlines()[0] == (
        f'code cell 2 `pagedlab.graded.run("task1")`: {points.BY_TASK["task1"].label} failed when the grader '
        "judged it, but this graded cell raised nothing in the notebook's kernel")


def test_feedback_only_checks_are_shown_but_earn_and_cost_nothing(tmp_path, monkeypatch):
    from pagedlab.spec import manifest

    monkeypatch.setitem(manifest.BY_ID, "task1", replace(manifest.BY_ID["task1"], feedback=("t1_b",)))
    results = quiet_grade(submission(tmp_path, t1_b="return 0"), tasks=["1"])
    task1 = by_number(results)["1"]
    assert task1["status"] == "passed" and task1["score"] == points.BY_TASK["task1"].points
    assert "1 of 1 checks passed (+1 feedback-only)" in task1["output"]
    assert "✗ t1_b returns 2  (feedback only, no points)" in task1["output"]
    # A crash in a feedback-only check costs nothing once every scored check has passed...
    results = quiet_grade(submission(tmp_path, t1_b="ctypes.string_at(0)"), tasks=["1"])
    assert by_number(results)["1"]["status"] == "passed"
    assert "SIGSEGV" in by_number(results)["1"]["output"]
    # ...and the checks after a crash still run, in a fresh process.
    monkeypatch.setitem(manifest.BY_ID, "task1", replace(manifest.BY_ID["task1"], feedback=("t1_a",)))
    results = quiet_grade(submission(tmp_path, t1_a="ctypes.string_at(0)"), tasks=["1"])
    assert by_number(results)["1"]["status"] == "passed"
    assert "✓ t1_b returns 2" in by_number(results)["1"]["output"]


@pytest.mark.task_wide
def test_the_instructor_readme_shows_the_points_table_as_it_is():
    from pagedlab.loader import ROOT

    text = (ROOT / "grading" / "README.md").read_text()
    rows = re.findall(r"^\| (task\d+) \| (.+?) \| (\d+) \| (\d+) s \| (.+?) \|$", text, re.M)
    assert rows == [(r.id, r.label, f"{r.points:g}", f"{r.time_limit:g}", ", ".join(r.files)) for r in points.TABLE]
    assert f"**{points.MAX_SCORE:g}**" in text


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="switching users needs root (as on Gradescope)")
@pytest.mark.xdist_group("users")  # grades as `nobody`, whose processes the grader kills (conftest.py)
def test_as_an_unprivileged_user_the_code_cannot_touch_the_grader(tmp_path, monkeypatch):
    """With PAGEDLAB_GRADE_USER the submission runs as that user: it cannot write where the
    grader keeps its files (here a root-owned folder standing in for /autograder/source)."""
    import subprocess
    import sys

    # The fake checks need only the standard library: any Python >= 3.10 the user may run will do
    # (this venv's interpreter can live under /root, out of the user's reach).
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            probe = subprocess.run([python, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                                   user="nobody", capture_output=True, timeout=30)
        except (PermissionError, FileNotFoundError):
            continue
        if probe.returncode == 0:
            monkeypatch.setattr(sys, "executable", python)
            break
    else:
        pytest.skip("no Python >= 3.10 that user 'nobody' may execute")
    import shutil
    import tempfile

    # Readable, not writable, by others; not under /tmp, which each sandboxed child has empty.
    guarded = Path(tempfile.mkdtemp(prefix=".pagedlab-grader-files-", dir=Path(__file__).parent))
    guarded.chmod(0o755)
    target = guarded / "pwned.txt"
    monkeypatch.setenv("PAGEDLAB_GRADE_USER", "nobody")
    try:
        results = quiet_grade(submission(
            tmp_path / "sub", t1_a=f"open({str(target)!r}, 'w').write('x')\nreturn 1",
            t2=f"return 3 if os.getuid() != 0 and os.access({str(guarded)!r}, os.R_OK | os.X_OK) else 0",
        ), tasks=["1", "2"])
    finally:
        shutil.rmtree(guarded)
    assert_gradescope_shape(results)
    tests = by_number(results)
    assert tests["1"]["status"] == "failed" and "PermissionError" in tests["1"]["output"]
    assert tests["2"]["status"] == "passed"  # and it really did not run as root

    # A daemon that leaves the task's process group (a new session) is killed after the task.
    # (Found by its command line: in a PID namespace the pid it sees is not root's.)
    marker = f"{300 + os.getpid() % 1000}.{time.time_ns() % 997}"
    body = f"""
    p = subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
    return 3
    """
    quiet_grade(submission(tmp_path / "daemon", t2=body), tasks=["2"])
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout
    assert left.strip() == "", "a process of the grading user survived its task"


def test_an_unknown_grading_user_is_a_clear_grader_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_GRADE_USER", "no-such-user-xyz")
    out = tmp_path / "r.json"
    assert cli.main(["grade", "--impl", str(submission(tmp_path / "s")), "--tasks", "1", "--json", str(out)]) == 2
    assert "no such user" in json.loads(out.read_text())["output"]


def test_the_autograder_zip_has_gradescopes_entry_points_at_its_root(tmp_path):
    import zipfile

    from pagedlab.grader import package

    path = package.build(tmp_path / "autograder.zip")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in zf.infolist()}
    assert {"setup.sh", "run_autograder", "pyproject.toml", "constraints.txt", "pagedlab/grader/cli.py",
            "requirements.lock", "tools/bootstrap.py", "pagedlab/lab/overrides.json",
            "solutions/memory_manager.py"} <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert not any(n.startswith((".venv/", "build/")) or "__pycache__" in n for n in names)


def test_a_runaway_allocation_fails_its_check_not_the_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_GRADE_MEMORY_GB", "1")
    results = quiet_grade(submission(tmp_path, t2="x = bytearray(3 << 30)\nreturn 3"), tasks=["1", "2"])
    tests = by_number(results)
    assert tests["1"]["status"] == "passed"
    assert tests["2"]["status"] == "failed" and "MemoryError" in tests["2"]["output"]
