"""Partial credit is honest: a submission with only some HW3 tasks written passes exactly those
tasks' checks. Submissions are made from the solution by stubbing the other tasks' fences, the
same way `pagedlab assign` makes the exercises.

The question is what the checks call, so the drivers run in this process and the real judge
decides against the grader's trusted records (a child process per task cost 35 interpreter
starts for what no stub can crash or hang); the sandboxed child that `pagedlab grade` runs is
graded end to end in tests/test_grading_real.py."""

from __future__ import annotations

import re

import pytest
from trusted_records import trusted_record

from pagedlab.assign import make_exercise
from pagedlab.drivers import record
from pagedlab.grader.judge import judge
from pagedlab.grader.pipeline import plan_for
from pagedlab.loader import ROOT
from pagedlab.spec import manifest

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


def results(task: str, folder) -> dict[str, tuple[bool, str]]:
    """{check name: (passed, message)} for the public checks of `task`, as the grader plans them."""
    checks, _ = plan_for(manifest.task(task), hidden=False)
    found = {}
    for c in checks:
        verdict = judge(trusted_record(c), record.drive(c, str(folder)))
        found[c.name] = (verdict.passed, verdict.message)
    return found


@pytest.mark.parametrize("done", [{1}, {2}, {1, 2}, {2, 3}, {2, 4}, {2, 5}, {1, 2, 3, 4}])
def test_only_the_written_tasks_pass(tmp_path, done):
    (tmp_path / "memory_manager.py").write_text(submission(done))
    for task in range(1, 6):
        res = results(f"task{task}", tmp_path)
        passed = [name for name, (ok, _) in res.items() if ok]
        assert res, f"task{task} has no checks"
        if task in done and not (task == 5 and done != {1, 2, 3, 4, 5}):
            assert len(passed) == len(res), f"task{task} should pass with tasks {done} written: " + \
                "; ".join(why for ok, why in res.values() if not ok)
        elif task not in done:
            assert not passed, f"task{task} passes without being written: {passed}"


def test_task5_only_needs_the_earlier_tasks_for_its_session_check(tmp_path):
    (tmp_path / "memory_manager.py").write_text(submission({2, 5}))
    res = results("task5", tmp_path)
    failing = [name for name, (ok, _) in res.items() if not ok]
    assert failing == ["a whole session with your own functions ends with 0 bytes lost"]
