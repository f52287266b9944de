"""A stand-in for the real graded checks, loaded by the grader's task processes through
PAGEDLAB_GRADING_PLUGIN, so tests of the grading machinery need neither torch nor the engine.

Each check calls one function of the submission's memory_manager.py; the tests write those
functions to pass, fail, crash or hang.

    task1: two checks (t1_a, t1_b)      task2: one check (t2)
    task3: no checks at all (a grader bug that must not hand out free points)
    task4: its check module is missing   task5: its check module fails to import
"""

from pagedlab import checks
from pagedlab.checks import check, expect_equal
from pagedlab.loader import load

# Keep the real check modules out: these fakes own tasks 1-5.
checks._loaded.add("hw3")
checks.CHECK_MODULES["task4"] = "no_such_check_module"
checks.CHECK_MODULES["task5"] = "fake_broken_module"
checks._loaded.add("fake_broken_module")  # stands in for a module that raised on import


def _call(impl, name):
    return getattr(load("memory_manager", impl), name)()


@check("task1", "t1_a returns 1", rule="fake rule A")
def _t1_a(impl):
    expect_equal(_call(impl, "t1_a"), 1, "t1_a() should return 1", rule="fake rule A")


@check("task1", "t1_b returns 2", rule="fake rule B")
def _t1_b(impl):
    expect_equal(_call(impl, "t1_b"), 2, "t1_b() should return 2", rule="fake rule B")


@check("task2", "t2 returns 3")
def _t2(impl):
    expect_equal(_call(impl, "t2"), 3, "t2() should return 3")


_real_checks_of = checks.checks_of


def _checks_of(task):
    if task == "task5":
        raise ImportError("fake_broken_module: simulated syntax error in a check module")
    return _real_checks_of(task)


checks.checks_of = _checks_of
