"""Every graded check passes on solutions/ and fails on the untouched exercises/ (spec §3).

This is what makes a score honest: a check that passes on the stubs grades nothing, and a check
that fails on the reference grades the wrong thing.
"""

import pytest

from pagedlab import checks


def _all_checks():
    params = []
    for task in checks.TASKS:
        try:
            found = checks.checks_of(task)
        except ImportError:
            # A task whose check module does not import fails loudly below, never silently.
            params.append(pytest.param(task, None, id=f"{task}-unloadable"))
            continue
        params += [pytest.param(task, c.name, id=f"{task}-{c.name}") for c in found]
    return params


def _result(task, name, impl):
    check = next(c for c in checks.checks_of(task) if c.name == name)
    try:
        check.fn(impl)
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


@pytest.mark.parametrize("task, name", _all_checks())
def test_check_passes_on_solutions_and_fails_on_exercises(task, name):
    assert checks.checks_of(task), f"{task} has no registered checks"
    assert name is not None
    error = _result(task, name, "solutions")
    assert error is None, f"fails on solutions/: {checks._explain(error)}"
    assert _result(task, name, "exercises") is not None, "passes on the untouched exercises/: it grades nothing"


def test_every_task_has_checks_registered():
    empty = [t for t in checks.TASKS if not checks.checks_of(t)]
    assert not empty, f"tasks without graded checks: {empty}"
