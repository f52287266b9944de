"""Feedback a student can act on: for one planted bug per task, the explanation printed under
the ✗ names the function that holds the bug and the rule that it broke, cited by notebook (the
students' text), never by a section of a document they do not have.

Each case runs the checks' real drivers in a child process and takes the verdict and its
message from the real judge, through one check server (tests/forked_checks.py: torch and the
checks imported once, each case in a fork); the last test here goes through the real runner.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pagedlab import graded as checks
from pagedlab.spec import manifest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_mutants  # noqa: E402
import test_attention  # noqa: E402
import test_buddy  # noqa: E402
import test_kernel  # noqa: E402
import test_prefix_mutants  # noqa: E402
import test_swap_mutants  # noqa: E402
import test_v2_mutants  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
import broken  # noqa: E402  (copies solutions/ for planted-bug submissions)
from forked_checks import CheckServer  # noqa: E402


@pytest.fixture(scope="module")
def server():
    found = CheckServer(torch=True)
    yield found
    found.close()


def _engine(name):
    spec = {m[0]: m for m in engine_mutants.MUTANTS}[name]
    return "memory_manager.py", spec[2], spec[3]


def _pair(table, name, file):
    entry = table[name]
    return (file, *entry[-2:]) if len(entry) == 3 and entry[0].startswith("task") else (file, *entry[:2])


# task -> (planted bug: file, text, replacement), what the explanation must name
CASES = {
    "task1": (_engine("init_malloc_refs"), "llm_init"),
    "task2": (_engine("break_at_null_l1"), "free_sequence"),
    "task3": (_engine("fork_no_ref_increment"), "fork_sequence"),
    "task4": (_engine("cow_copies_60_bytes"), "append_kv"),
    "task5": (_engine("destroy_leaks_ref_array"), "llm_destroy"),
    "task6": (_pair(test_attention.PY_MUTANTS, "slot ignores the table", "paged_attention.py"), "slot_mapping"),
    "task7": (_pair(test_attention.PY_MUTANTS, "write forgets V", "paged_attention.py"), "write_kv"),
    "task8": (_pair(test_attention.PY_MUTANTS, "gather ignores the table", "paged_attention.py"), "gather_kv"),
    "task9": (_pair(test_attention.PY_MUTANTS, "attention forgets the scale", "paged_attention.py"),
              "paged_attention"),
    "task10": (("paged_attention.cu", *test_kernel.KERNEL_MUTANTS["barrier after loading q missing"]),
               "paged_attention.cu:"),
    "task11": (_pair(test_prefix_mutants.MUTANTS, "head-first free", "prefix_cache.py"), "free"),
    "task12": (_pair(test_buddy.MUTANTS, "highest address first", "buddy.py"), "alloc("),
    "task13": (_pair(test_swap_mutants.MUTANTS, "records not copied", "swap.py"), "swap_out"),
    "task14": (_pair(test_v2_mutants.MUTANTS, "missing max correction in the reduce", "paged_attention_v2.cu"),
               "paged_attention_v2"),
}


def _case(task: str):
    """The planted bug of CASES or, for a task without one (a new task), a generic one: the
    task's first fenced region replaced by `return None`; the explanation must then name the
    fence's title (what the student's function is called there)."""
    if task in CASES:
        return CASES[task]
    name = manifest.task(task).files[0]
    solution = (ROOT / "solutions" / name).read_text()
    fence = re.search(rf"^([ \t]*)### BEGIN SOLUTION Task {manifest.task(task).number}: (.+?)\n.*?"
                      r"^[ \t]*### END SOLUTION\n", solution, re.S | re.M)
    assert fence, f"{task}: add a planted bug to CASES (no Python fence to replace in solutions/{name})"
    return (name, fence.group(0), f"{fence.group(1)}return None\n"), fence.group(2).strip()


@pytest.mark.task_wide
def test_every_task_has_a_feedback_case():
    assert set(CASES) <= set(manifest.TASKS), "a case for a task the manifest no longer has"
    assert all(_case(task) for task in manifest.TASKS)


@pytest.mark.slow
@pytest.mark.task_wide
@pytest.mark.parametrize("task", sorted(manifest.TASKS, key=lambda t: int(t[4:])))
def test_the_explanation_names_the_function_and_the_rule(task, tmp_path, server):
    (filename, old, new), function = _case(task)
    broken.copy_solutions(tmp_path)
    text = (tmp_path / filename).read_text()
    assert old in text, f"{task}: the planted bug no longer applies to solutions/{filename}"
    (tmp_path / filename).write_text(text.replace(old, new, 1))
    failed = [message for passed, message in server.grade(tmp_path, [task]).values() if not passed]
    assert failed, f"{task}: the planted bug was not caught"
    row = manifest.task(task)
    message = failed[0]
    assert function in message, f"{task}: the explanation does not name {function}:\n{message}"
    assert f"rule:     notebook {row.notebook_number}" in message, f"{task}: no notebook rule:\n{message}"
    assert "§" not in message, message


def test_a_crash_inside_a_given_helper_is_told_at_the_students_call(tmp_path):
    """`list_del` is given (no solution fence): a `list_del(None)` in free_sequence crashes inside
    it, and the student's line that called it is the one named. The check child reads the given
    functions from the grader's plan (it may not open expected.json); measured before: the
    package move's first cut named list_del's own line."""
    broken.copy_solutions(tmp_path)
    path = tmp_path / "memory_manager.py"
    call = "    destroy_sequence(engine, seq)\n    return 0\n"
    text = path.read_text()
    assert call in text
    path.write_text(text.replace(call, "    list_del(None)\n" + call, 1))
    failed = [r for r in checks.results("task2", tmp_path) if not r.passed]
    message = next(r.message for r in failed if "AttributeError" in r.message)
    assert "(free_sequence): list_del(None)" in message and "(list_del)" not in message, message


def test_a_deliberate_raise_in_correct_code_points_at_the_caller(tmp_path):
    """Measured before: a Task 11 bug in allocate (it never checked for a free block) was reported
    at popleft, whose `raise MemoryError` is correct. Now the caller's line is the one named."""
    broken.copy_solutions(tmp_path)
    path = tmp_path / "prefix_cache.py"
    text = path.read_text()
    check = "        if num_new > pool.num_free_blocks - idle_hits:\n            return None"
    assert check in text
    path.write_text(text.replace(check, "        if False:\n            return None"))
    failed = [r for r in checks.results("task11", tmp_path) if not r.passed]
    message = next(r.message for r in failed if "MemoryError" in r.message)
    assert "in popleft" in message and "a deliberate `raise`" in message, message
    assert "(allocate)" in message, message
