"""A stand-in for the real graded checks, loaded on both sides of grading (the drivers' child and
the judging parent) through PAGEDLAB_GRADING_PLUGIN, so tests of the grading machinery need
neither torch nor the engine. The trusted records come from running the same drivers on a
correct stand-in submission (PAGEDLAB_REFERENCE), as the grader runs the reference solution.

Each check calls one function of the submission's memory_manager.py; the tests write those
functions to pass, fail, crash or hang.

    task1: two checks (t1_a, t1_b)      task2: one check (t2)
    task3: no checks at all (a grader bug that must not hand out free points)
    task4: its check module is missing   task5: its check module fails to import
"""

from pagedlab.drivers.record import expect_equal
from pagedlab.grader import registry
from pagedlab.guard import audit
from pagedlab.spec.catalog import check

# These submissions crash, hang and fork with os/subprocess/sys on purpose, to test the process
# isolation beneath the student API; the API itself is tested in tests/test_student_api.py.
audit.ENFORCED = False

# Keep the real check modules out: these fakes own tasks 1-5.
registry._loaded.add("memory_manager")


def _call(run, name):
    return getattr(run.load("memory_manager"), name)()


@check("task1", "t1_a returns 1", rule="fake rule A")
def _t1_a(run):
    expect_equal(_call(run, "t1_a"), 1, "t1_a() should return 1", rule="fake rule A")


@check("task1", "t1_b returns 2", rule="fake rule B")
def _t1_b(run):
    expect_equal(_call(run, "t1_b"), 2, "t1_b() should return 2", rule="fake rule B")


@check("task2", "t2 returns 3")
def _t2(run):
    expect_equal(_call(run, "t2"), 3, "t2() should return 3")


def _checks_of(task, *, hidden=False, hidden_from=None):
    if task == "task4":
        raise ImportError("no_such_check_module: pagedlab/drivers/no_such_check_module.py is not installed")
    if task == "task5":
        raise ImportError("fake_broken_module: simulated syntax error in a check module")
    found = registry._checks_of(task, hidden=False)
    return [] if hidden is True else found


registry._checks_of_override = _checks_of


def t2_twice(run):
    """Registered only by a test, in the grader's process (a registry the child does not have):
    the child runs it because the grader's plan names it."""
    expect_equal([_call(run, "t2"), _call(run, "t2")], [3, 3], "t2() should return 3, twice")
