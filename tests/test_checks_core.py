"""The check runner turns any student bug into a failed result with a message a student can act on."""

import sys

import pytest

from pagedlab import checks
from pagedlab.checks import Check, CheckFailure


def _check(fn):
    return Check("task1", "a check", fn)


def test_a_passing_check():
    assert checks.run_one(_check(lambda impl: None)) == checks.Result("task1", "a check", True)


def test_check_failure_reports_rule_expected_and_yours():
    def fn(impl):
        checks.expect_equal([2, 1], [0, 1], "first-fit picks the lowest blocks", rule="§4.2 first-fit")

    r = checks.run_one(_check(fn))
    assert not r.passed
    assert r.message.splitlines() == ["first-fit picks the lowest blocks", "  rule:     §4.2 first-fit",
                                      "  expected: [0, 1]", "  yours:    [2, 1]"]


def test_stub_and_crashing_student_code_become_failures(tmp_path):
    r = checks.run_one(_check(lambda impl: (_ for _ in ()).throw(NotImplementedError("Task 1: llm_init"))))
    assert r.message == "not implemented yet: Task 1: llm_init"
    student = tmp_path / "memory_manager.py"
    student.write_text("def llm_init():\n    return 1 / 0\n")
    namespace = {}
    exec(compile(student.read_text(), str(student), "exec"), namespace)
    r = checks.run_one(_check(lambda impl: namespace["llm_init"]()))
    assert "ZeroDivisionError" in r.message and f"{student}:2 (llm_init)" in r.message


def test_sys_exit_in_student_code_fails_the_check_instead_of_ending_the_run():
    r = checks.run_one(_check(lambda impl: sys.exit(3)))
    assert not r.passed and r.message == "your code called sys.exit(3)"


def test_run_prints_each_check_and_raises_one_short_failure(monkeypatch, capsys):
    fake = [Check("task1", "passes", lambda impl: None),
            Check("task1", "fails", lambda impl: checks.expect(False, "ref_count must start at zero"))]
    monkeypatch.setattr(checks, "checks_of", lambda task: fake)
    with pytest.raises(CheckFailure, match=r"1 of 2 checks failed .* First: fails\nref_count must start at zero"):
        checks.run("task1")
    out = capsys.readouterr().out
    assert "  ✓ passes" in out and "  ✗ fails" in out
