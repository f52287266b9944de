"""Drivers record, the judge decides: a student's bug becomes a failed check with a message a
student can act on (rule, expected, yours), and no value the child sends can make it pass."""

import sys

from pagedlab.drivers import record
from pagedlab.drivers.record import Stream
from pagedlab.grader import judge
from pagedlab.spec.catalog import Check


def _check(fn):
    return Check("task1", "a check", fn, rule="notebook 05, First-fit after holes")


def _record(fn):
    return record.drive(_check(fn))


def test_the_judge_explains_the_first_difference_with_the_trusted_label_and_rule():
    trusted = _record(lambda run: record.expect_equal([0, 1], [0, 1], "first-fit picks the lowest blocks",
                                                         rule="notebook 05, First-fit after holes"))
    mine = _record(lambda run: record.expect_equal([2, 1], [0, 1], "FORGED LABEL", rule="forged rule"))
    verdict = judge.judge(trusted, mine)
    assert not verdict.passed
    lines = verdict.message.splitlines()
    assert lines[0] == "your code's results sent the check down another path than the reference's"
    assert "  the reference's next step: first-fit picks the lowest blocks" in lines, lines
    mine = _record(lambda run: record.expect_equal([2, 1], [0, 1], "first-fit picks the lowest blocks"))
    lines = judge.judge(trusted, mine).message.splitlines()
    assert lines == ["first-fit picks the lowest blocks", "  rule:     notebook 05, First-fit after holes",
                     "  expected: [0, 1]", "  yours:    [2, 1]"]


def test_a_stub_a_crash_and_sys_exit_become_explained_failures(tmp_path):
    trusted = _record(lambda run: record.see("value", 1))
    stub = _record(lambda run: (_ for _ in ()).throw(NotImplementedError("Task 1: llm_init")))
    assert judge.judge(trusted, stub).message == "not implemented yet: Task 1: llm_init"
    student = tmp_path / "memory_manager.py"
    student.write_text("def llm_init():\n    return 1 / 0\n")
    namespace = {}
    exec(compile(student.read_text(), str(student), "exec"), namespace)
    crash = judge.judge(trusted, _record(lambda run: namespace["llm_init"]()))
    assert "ZeroDivisionError" in crash.message and f"{student}:2 (llm_init)" in crash.message
    exited = judge.judge(trusted, _record(lambda run: sys.exit(3)))
    assert exited.message.startswith("your code called sys.exit(3) at ")


def test_uninitialised_freed_and_never_written_patterns_are_decoded():
    trusted = _record(lambda run: record.see("L2 entry", -1))
    for value, words in ((-842150451, "uninitialised memory from malloc"), (0xDDDDDDDD, "freed memory"),
                         (0x5A000123, "never-written pattern")):
        mine = _record(lambda run, v=value: record.see("L2 entry", v))
        assert words in judge.judge(trusted, mine).message


def test_records_that_claim_success_without_the_values_fail():
    trusted = _record(lambda run: record.see("ref counts", [1, 0, 2]))
    assert not judge.judge(trusted, Stream([], "completed")).passed
    assert not judge.judge(trusted, Stream([{"w": "ref counts", "v": True, "k": "eq"}], "completed")).passed
    assert judge.judge(trusted, Stream([{"w": "ref counts", "v": [1, 0, 2], "k": "eq"}], "completed")).passed


def test_a_broken_reference_is_the_graders_problem():
    trusted = _record(lambda run: record.expect(False, "reference fails"))
    verdict = judge.judge(trusted, trusted)
    assert not verdict.passed and verdict.grader_problem


def test_arrays_are_judged_within_tolerance_and_nan_is_never_right():
    import numpy as np

    want = np.linspace(1, 2, 8)
    trusted = _record(lambda run: run.see_array("out", want, tol=1e-6))
    close = _record(lambda run: run.see_array("out", want * (1 + 1e-8), tol=1e-6))
    assert judge.judge(trusted, close).passed
    nan = want.copy()
    nan[3] = np.nan
    verdict = judge.judge(trusted, _record(lambda run: run.see_array("out", nan, tol=1e-6)))
    assert not verdict.passed and "NaN" in verdict.message
