"""Every graded check passes on solutions/ and fails on the untouched exercises/ — public and
hidden, judged exactly as the grader judges (spec §3).

This is what makes a score honest: a check that passes on the stubs grades nothing, and a check
that fails on the reference grades the wrong thing. Drivers run in-process here (the suite is the
instructor's, not a student's); the verdict is the judge's, against the trusted record.
"""

from pathlib import Path

import pytest
from trusted_records import trusted_record

from pagedlab import track
from pagedlab.drivers import record
from pagedlab.grader import golden, judge, registry
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ROOT / "grading" / "hidden"


def _all_checks():
    params = []
    for task in manifest.TASKS:
        try:
            found = registry.checks_of(task, hidden=None, hidden_from=HIDDEN)
        except ImportError:
            params.append(pytest.param(task, None, id=f"{task}-unloadable"))
            continue
        params += [pytest.param(task, c.key, id=c.key) for c in found]
    return params


@pytest.mark.task_wide
@pytest.mark.parametrize("task, key", _all_checks())
def test_check_passes_on_solutions_and_fails_on_exercises(task, key):
    assert key is not None, f"{task}'s check module does not import"
    c = registry.find(task, key)
    seeds = (0,) if not c.hidden else (1234567, 42)
    for seed in seeds:
        trusted = trusted_record(c, seed)
        assert trusted is not None, f"{key} has no committed record: run `pagedlab assign`"
        ok = judge.judge(trusted, record.drive(c, "solutions", seed))
        assert ok.passed, f"fails on solutions/ (seed {seed}): {ok.message}"
        stub = judge.judge(trusted, record.drive(c, "exercises", seed))
        assert not stub.passed, f"passes on the untouched exercises/ (seed {seed}): it grades nothing"


@pytest.fixture(scope="module")
def c_stub(tmp_path_factory):
    """A C-track submission that is the shipped stub: exercises/llm_memory.c alone."""
    folder = tmp_path_factory.mktemp("c-stub")
    (folder / track.C_FILE).write_bytes((ROOT / "exercises" / track.C_FILE).read_bytes())
    return folder


PART_A = [p for p in _all_checks() if p.values[0] in {r.id for r in manifest.TABLE if track.PYTHON_FILE in r.files}]


@pytest.mark.task_wide
@pytest.mark.parametrize("task, key", PART_A)
def test_check_fails_on_the_untouched_c_stub_as_not_implemented(task, key, c_stub):
    """The C track's stubs grade like the Python ones: every Part A check, public and hidden,
    fails, saying "not implemented yet" (they once returned NULL / -1, which passed 5 checks that
    only test rejections, and said "expected: an LLMEngine view / yours: None")."""
    c = registry.find(task, key)
    seed = 0 if not c.hidden else 42
    verdict = judge.judge(trusted_record(c, seed), record.drive(c, str(c_stub), seed))
    assert not verdict.passed, "passes on the untouched llm_memory.c: it grades nothing"
    assert verdict.message.startswith("not implemented yet: Task"), verdict.message


@pytest.mark.task_wide
def test_every_task_has_public_and_hidden_checks():
    for task in manifest.TASKS:
        assert registry.checks_of(task, hidden=False), f"{task} has no public checks"
        assert registry.checks_of(task, hidden=True, hidden_from=HIDDEN), f"{task} has no hidden checks"


@pytest.mark.task_wide
def test_committed_records_are_current():
    """expected.json is what the reference records today (regenerate with `pagedlab assign`)."""
    assert not golden.stale(), "solutions/ or the checks changed since expected.json: run `pagedlab assign`"
    fresh = golden.generate()
    assert fresh["records"] == golden.load()["records"]
