"""`pagedlab grade` on the real checks: solutions, stubs, broken submissions and mutants.

A broken submission (tests/submissions/broken.py) is a copy of solutions/ with one function
broken by a text substitution made at test time (asserted to apply), so it follows the
solutions as they change. Each test grades the tasks that read the broken file plus a control:
`test_solutions_earn_full_marks_and_each_task_needs_only_its_listed_files` proves that a task
reads nothing but the files the points table lists, so the tasks left out cannot be affected.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pagedlab import cli
from pagedlab.grader.cli import grade
from pagedlab.grader.pipeline import GRACE
from pagedlab.loader import ROOT
from pagedlab.sandbox.policy import WALL_FACTOR
from pagedlab.spec import points

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "submissions"))
import broken  # noqa: E402

SOLUTIONS = ROOT / "solutions"
HW3 = [row.task for row in points.TABLE if points.MEMORY_MANAGER in row.files]


def tasks_reading(filename: str) -> list[str]:
    return [row.task for row in points.TABLE if filename in row.files]


def broken_copy(folder: Path, filename: str, old: str | None, new: str | None, *, once: bool = True) -> Path:
    """solutions/ copied to `folder` with `old` replaced by `new` in `filename` (exactly once,
    or everywhere for suites whose mutants are written that way)."""
    broken.copy_solutions(folder)
    if old is not None:
        broken.mutate(folder, filename, old, new, once=once)
    return folder


def quiet(impl, tasks, **kwargs) -> dict:
    """Graded with hidden checks; the per-task entries only (hidden details are in "Nh" entries)."""
    results = grade(str(impl), tasks=tasks, echo=lambda *a: None, **kwargs)
    results["details"] = [t for t in results["tests"] if t["number"].endswith("h")]
    results["tests"] = [t for t in results["tests"] if not t["number"].endswith("h")]
    return results


def scores(results: dict) -> dict[str, float]:
    return {f"task{t['number']}": t["score"] for t in results["tests"] if not t["number"].endswith("h")}


def failed_tasks(results: dict) -> set[str]:
    return {f"task{t['number']}" for t in results["tests"] if t["status"] == "failed" and not t["number"].endswith("h")}


def full(task: str) -> float:
    return points.BY_TASK[task].points


# ---------------------------------------------------------------- solutions and stubs


@pytest.mark.task_wide
@pytest.mark.parametrize("filename", points.SUBMISSION_FILES)
def test_solutions_earn_full_marks_and_each_task_needs_only_its_listed_files(tmp_path, filename):
    """A folder holding one solution file earns the full points of every task listing it: the
    solutions score 100 in total, and a task reads nothing but the files the table lists."""
    shutil.copyfile(SOLUTIONS / filename, tmp_path / filename)
    tasks = tasks_reading(filename)
    results = quiet(tmp_path, tasks)
    assert scores(results) == {task: full(task) for task in tasks}, \
        [t["output"] for t in results["tests"] if t["status"] == "failed"]
    assert all(t["status"] == "passed" and "✗" not in t["output"] for t in results["tests"])


@pytest.mark.task_wide
def test_every_task_is_listed_under_some_file_and_the_table_sums_to_its_points():
    assert sorted(t for f in points.SUBMISSION_FILES for t in tasks_reading(f)) == sorted(points.BY_TASK)
    assert points.MAX_SCORE == sum(row.points for row in points.TABLE) > 0


def test_grade_solutions_from_the_command_line_writes_results_json(tmp_path):
    out = tmp_path / "results.json"
    assert cli.main(["grade", "--impl", "solutions", "--tasks", "1,11", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["score"] == full("task1") + full("task11")
    assert [t["number"] for t in results["tests"]] == ["1", "1h", "11", "11h"]  # + hidden details


def test_untouched_exercises_score_zero_on_every_task():
    """Each task's stub fails through the real child, as a stub (never as a grader problem).
    Public checks only: every hidden check fails on the stubs in tests/test_graded_checks.py, and
    grading with hidden checks (a reference run per task) is shown by the solutions tests."""
    results = quiet("exercises", None, hidden=False)
    assert results["score"] == 0
    for t in results["tests"]:
        assert t["status"] == "failed", t["name"]
        # Every check fails on the stubs (none passes by accident), and the grader ran them all.
        total = re.search(r"0 of (\d+) checks passed", t["output"])
        assert total and int(total.group(1)) > 0, t["output"]
        assert "autograder problem" not in t["output"] and "stopped here" not in t["output"]
        assert "not implemented yet" in t["output"] or "never written" in t["output"], t["output"]


# ---------------------------------------------------------------- broken submissions

# broken.BROKEN name -> (tasks graded, PAGEDLAB_GRADE_TIME_SCALE, what the failed task's output says)
BROKEN_CASES = {
    "segfault": (HW3, None, ["crashed with SIGSEGV", "memory_manager.py", "fork_sequence"]),
    # Task 5's feedback-only session check appends too, and hangs as well: it costs nothing.
    "infinite-loop": (HW3, "0.2", ["timed out after 6 s", "append_kv"]),
    "syntax-error": (["task1", "task11"], None, ["SyntaxError"]),
    "kernel-compile-error": (["task10", "task11"], None, ["the kernel failed to run"]),
    # Built before the clock starts, so a short limit is spent in the hung launch (the runner's
    # spin): the cut is the point, not the limit's value. The control after a hang: infinite-loop.
    "kernel-hang": (["task10"], "0.04", ["timed out after 6 s", "in _launch_in_runner"]),
    "import-error": (["task6", "task11"], None, ["torchh"]),
}


@pytest.mark.parametrize("name", list(BROKEN_CASES))
def test_a_broken_submission_fails_only_the_affected_task_within_the_limits(tmp_path, monkeypatch, name):
    """Public checks only: a crash or hang in a hidden check is met by the same loop of fresh
    children, and hidden checks would add a reference run per task."""
    tasks, scale, says = BROKEN_CASES[name]
    if scale:
        monkeypatch.setenv("PAGEDLAB_GRADE_TIME_SCALE", scale)
    sub = broken.make(name, tmp_path / name)
    if name == "kernel-hang":
        from pagedlab.cuda import compiler

        code = (sub / points.KERNEL).read_text()
        for sanitize in (False, True):  # the checks' first launch of each case is sanitized
            compiler.build(code, points.KERNEL, sanitize=sanitize)
    began = time.perf_counter()
    results = quiet(sub, tasks, hidden=False)
    elapsed = time.perf_counter() - began
    json.loads(json.dumps(results))
    target = broken.BROKEN[name][3]
    assert failed_tasks(results) == {target}
    assert results["score"] == sum(full(t) for t in tasks) - full(target)
    out = next(t["output"] for t in results["tests"] if f"task{t['number']}" == target)
    for text in says:
        assert text in out, out
    assert "autograder problem" not in out
    # The limits are CPU time; a loaded machine may stretch them on the clock, WALL_FACTOR times.
    limits = sum(points.BY_TASK[t].limit() + GRACE for t in tasks) * WALL_FACTOR
    assert elapsed < limits, f"the run took {elapsed:.0f} s, over the sum of its wall limits ({limits:.0f} s)"


# ---------------------------------------------------------------- mutants


# Through the real grader: one mutant per HW3 task's own fence, plus one in a shared helper (the
# first-fit scan, called by create, fork and append) and the segfaulting one. Every mutant's
# failed tasks are checked against the same rule in tests/test_engine_mutants.py, through the
# real drivers and judge.
GRADED_ENGINE_MUTANTS = ("break_at_null_l1", "last_fit", "skip_cow_copy", "l2_before_oom_check",
                         "wild_write_segfaults")


def _engine_mutants():
    import engine_mutants  # the engine suite's planted bugs (tests/engine_mutants.py)

    return [(name, old, new) for name, _, old, new in engine_mutants.MUTANTS if name in GRADED_ENGINE_MUTANTS]


def test_engine_mutants_lose_exactly_the_points_of_the_tasks_they_break(tmp_path):
    """Engine mutants graded by `pagedlab grade`: each fails the task whose fence it edits (or a
    task calling that helper), costs exactly those tasks' points, and leaves every other HW3 task
    at full marks. Public checks only: each hidden check would add a reference run per task and
    mutant, and grading with hidden checks is shown by the solutions and stubs tests above."""
    from engine_mutants import fenced_function_tasks, function_at, tasks_reaching

    path = SOLUTIONS / points.MEMORY_MANAGER
    fenced = fenced_function_tasks(path)
    mutants = _engine_mutants()
    assert len(mutants) == len(GRADED_ENGINE_MUTANTS), "a chosen mutant was renamed in tests/engine_mutants.py"
    # Parsed before the grading threads start: CPython 3.11's ast.parse is not safe while another
    # thread parses (gh-106905), and the grader parses each submission at intake.
    where = {old: function_at(path, old) for _, old, _ in mutants}
    reach = {function: tasks_reaching(path, function) for function in set(where.values())}

    def one(mutant):
        name, old, new = mutant
        sub = broken_copy(tmp_path / name, points.MEMORY_MANAGER, old, new)
        return name, old, quiet(sub, HW3, hidden=False)

    problems = []
    with ThreadPoolExecutor(2) as pool:
        for name, old, results in pool.map(one, mutants):
            function = where[old]
            own = fenced.get(function)
            allowed = reach[function] | ({own} if own else set())
            failed = failed_tasks(results)
            expected_score = sum(full(t) for t in HW3) - sum(full(t) for t in failed)
            if not failed:
                problems.append(f"{name}: no task lost points")
            elif not failed <= allowed:
                problems.append(f"{name} (in {function}): failed {sorted(failed)}, only {sorted(allowed)} call it")
            elif results["score"] != expected_score or any(scores(results)[t] != full(t) for t in set(HW3) - failed):
                problems.append(f"{name}: score {results['score']} != {expected_score}")
            elif any("autograder problem" in t["output"] for t in results["tests"]):
                problems.append(f"{name}: reported as a grader problem: "
                                + next(t["output"] for t in results["tests"] if "autograder problem" in t["output"])[-600:])
    assert not problems, "\n".join(problems)


# One kernel mutant per way a kernel bug reaches the grader: a wrong value, a race, an
# out-of-bounds read, output never written, a schedule-dependent barrier bug. The other planted
# kernel bugs are wrong values too: test_kernel.test_kernel_checks_catch_planted_bug catches each.
KERNEL_MUTANTS_GRADED = ["scale not applied", "barrier after loading q missing", "loop bound t <= seq_len",
                         "only half of out written", "barrier before the softmax sum missing"]


def _kernel_mutants():
    import test_kernel  # the kernel suite's planted bugs (KERNEL_MUTANTS)

    return [(name, test_kernel.KERNEL_MUTANTS[name]) for name in KERNEL_MUTANTS_GRADED]


def test_kernel_mutants_lose_exactly_task10s_points(tmp_path):
    """A planted kernel bug of each kind costs Task 10's points, as a kernel bug (not a grader
    problem). Public checks only, as for the engine mutants. The unmutated kernel earns them in
    test_solutions_earn_full_marks_and_each_task_needs_only_its_listed_files[paged_attention.cu]."""
    tasks = tasks_reading(points.KERNEL)
    assert tasks == ["task10"]

    def one(item):
        name, (old, new) = item
        folder = tmp_path / re.sub(r"\W", "_", name)
        return name, quiet(broken_copy(folder, points.KERNEL, old, new, once=False), tasks, hidden=False)

    with ThreadPoolExecutor(2) as pool:
        graded = dict(pool.map(one, _kernel_mutants()))
    problems = []
    for name, results in graded.items():
        out = results["tests"][0]["output"]
        if results["score"] != 0 or failed_tasks(results) != {"task10"}:
            problems.append(f"{name}: score {results['score']}")
        elif "autograder problem" in out or ("kernel output (" not in out and "failed to run" not in out):
            problems.append(f"{name}: not reported as a kernel bug:\n{out}")
    assert not problems, "\n".join(problems)


def test_attention_mutants_cost_their_own_task(tmp_path):
    """A Part B mutant (test_attention proves each is caught) fails the task it is written for;
    only tasks calling the broken function (gather_kv calls slot_mapping) may fail with it, and
    the score drops by exactly the failed tasks' points. Graded: its own task and every task that
    must not fail (one calling the broken function may pass or fail: it would prove nothing).
    Public checks only, as for the engine mutants."""
    import test_attention
    from engine_mutants import function_at, tasks_reaching

    path = SOLUTIONS / points.PAGED_ATTENTION
    problems = []
    chosen = ["slot offset hard-coded to 16"]
    for name, (task, old, new) in ((n, test_attention.PY_MUTANTS[n]) for n in chosen):
        if (SOLUTIONS / points.PAGED_ATTENTION).read_text().count(old) != 1:
            continue  # test_attention asserts its own mutants apply
        allowed = tasks_reaching(path, function_at(path, old)) | {task}
        tasks = [t for t in tasks_reading(points.PAGED_ATTENTION) if t == task or t not in allowed]
        assert len(tasks) > 1, f"{name}: every task calls the broken function; nothing shows it stays put"
        results = quiet(broken_copy(tmp_path / re.sub(r"\W", "_", name), points.PAGED_ATTENTION, old, new), tasks,
                        hidden=False)
        failed = failed_tasks(results)
        if task not in failed or not failed <= allowed:
            problems.append(f"{name}: failed {sorted(failed)}, expected {task} (allowed {sorted(allowed)})")
        elif results["score"] != sum(full(t) for t in set(tasks) - failed):
            problems.append(f"{name}: score {results['score']}")
    assert not problems, "\n".join(problems)


@pytest.mark.task_wide
def test_feedback_only_entries_name_registered_checks():
    from pagedlab.grader import registry

    for row in points.TABLE:
        names = [c.name for c in registry.checks_of(row.id)]
        for prefix in row.feedback:
            assert any(n.startswith(prefix) for n in names), f"{row.id} has no check starting {prefix!r}: {names}"


def test_the_gpu_check_joins_task10_when_asked_and_fails_without_a_gpu(monkeypatch):
    """On a GPU machine Task 10 also runs the kernel through CuPy. Forcing that check here, with
    no GPU, proves the wiring: it is listed, fails saying why, and costs Task 10 its points."""
    from pagedlab.drivers import gpu

    if gpu.gpu_usable():
        pytest.skip("a GPU is present: the GPU check runs for real in every Task 10 grade")
    monkeypatch.setenv("PAGEDLAB_GRADE_GPU", "1")
    out = quiet("solutions", ["task10"])["tests"][0]
    assert out["status"] == "failed"
    assert "✗ the same kernel on the GPU (CuPy RawKernel)" in out["output"]
    assert "no usable GPU" in out["output"]
    from pagedlab.grader import registry

    monkeypatch.delenv("PAGEDLAB_GRADE_GPU")
    assert out["output"].count("✓") == len(registry.checks_of("task10"))  # the CPU-executor checks pass
