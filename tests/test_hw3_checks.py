"""The HW3 graded checks as students and the grader meet them: all pass on solutions/, every
task fails on the untouched exercises/, and a failure says what, where and which rule."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagedlab import cmem, graded
from pagedlab.drivers import record
from pagedlab.grader import registry
from pagedlab.spec.catalog import CheckFailure

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_mutants  # noqa: E402

HW3_TASKS = ["task1", "task2", "task3", "task4", "task5"]


@pytest.mark.parametrize("task", HW3_TASKS)
def test_all_checks_pass_on_solutions(task, capsys):
    assert graded.run(task, "solutions") is None  # nothing for Jupyter to echo after the ✓ lines
    assert f"All {len(registry.checks_of(task))} checks passed" in capsys.readouterr().out
    res = graded.results(task, "solutions")
    assert len(res) >= 3 and all(r.passed for r in res)


@pytest.mark.parametrize("task", HW3_TASKS)
def test_every_check_fails_on_untouched_exercises(task):
    res = graded.results(task, "exercises")
    assert res and not any(r.passed for r in res)
    assert all("not implemented yet" in r.message for r in res)
    with pytest.raises(CheckFailure, match=f"{len(res)} of {len(res)} checks did not pass"):
        graded.run(task, "exercises", quiet=True)


def test_solution_checks_leave_no_heap_behind():
    """The drivers clean up after themselves, so one child can run a whole task's checks."""
    snap = cmem.snapshot()
    for task in HW3_TASKS:
        for c in registry.checks_of(task):
            assert record.drive(c, "solutions").status == "completed"
    assert not cmem.changes_since(snap).allocated, cmem.leak_report(snap)


@pytest.mark.parametrize("mutant, task, words", [
    ("l2_before_oom_check", "task4", ["rule:", "Check before allocate", "expected: no malloc", "yours:", "new_l2_table"]),
    ("break_at_null_l1", "task2", ["ALL 16 L1 slots", "expected: 48", "yours:    42"]),
    ("cow_copies_60_bytes", "task4", ["exactly 64 bytes", "0x5a00001f"]),
    ("destroy_leaks_ref_array", "task5", ["0 bytes lost", "definitely lost", "in llm_init"]),
    ("free_no_unlink", "task2", ["use after free", "freed at memory_manager.py"]),
])
def test_failure_messages_name_rule_expected_and_actual(tmp_path, mutant, task, words):
    engine_mutants.write_mutant(mutant, tmp_path)
    failed = [r for r in graded.results(task, str(tmp_path)) if not r.passed]
    assert failed
    text = "\n".join(r.message for r in failed)
    for w in words:
        assert w in text, f"{w!r} missing from:\n{text}"
