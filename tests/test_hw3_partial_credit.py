"""Partial credit is honest: a submission with only some HW3 tasks written passes exactly those
tasks' checks. Submissions are made from the solution by stubbing the other tasks' fences, the
same way `pagedlab assign` makes the exercises."""

from __future__ import annotations

import re

import pytest

from pagedlab import checks
from pagedlab.assign import make_exercise
from pagedlab.loader import ROOT

SOLUTION = ROOT / "solutions" / "memory_manager.py"
_BEGIN = re.compile(r"^\s*### BEGIN SOLUTION Task (\d+)")
_END = re.compile(r"^\s*### END SOLUTION")


def submission(done: set[int]) -> str:
    """The solution with the fences of tasks in `done` dissolved (kept) and the rest stubbed."""
    out, keep = [], False
    for line in SOLUTION.read_text().splitlines(keepends=True):
        begin = _BEGIN.match(line)
        if begin:
            keep = int(begin.group(1)) in done
            if keep:
                continue
        elif _END.match(line) and keep:
            keep = False
            continue
        out.append(line)
    return make_exercise("".join(out), "memory_manager.py")


@pytest.mark.parametrize("done", [{1}, {2}, {1, 2}, {2, 3}, {2, 4}, {2, 5}, {1, 2, 3, 4}])
def test_only_the_written_tasks_pass(tmp_path, done):
    (tmp_path / "memory_manager.py").write_text(submission(done))
    for task in range(1, 6):
        res = checks.results(f"task{task}", str(tmp_path))
        passed = [r.name for r in res if r.passed]
        if task in done and not (task == 5 and done != {1, 2, 3, 4, 5}):
            assert len(passed) == len(res), f"task{task} should pass with tasks {done} written: " + \
                "; ".join(r.message for r in res if not r.passed)
        elif task not in done:
            assert not passed, f"task{task} passes without being written: {passed}"


def test_task5_only_needs_the_earlier_tasks_for_its_session_check(tmp_path):
    (tmp_path / "memory_manager.py").write_text(submission({2, 5}))
    res = {r.name: r for r in checks.results("task5", str(tmp_path))}
    failing = [n for n, r in res.items() if not r.passed]
    assert failing == ["a whole session with your own functions ends with 0 bytes lost"]
