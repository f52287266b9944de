"""Every planted bug in tests/engine_mutants.py is caught by the HW3 graded checks.

The mutants go through one check server (tests/forked_checks.py): the real drivers and judge,
imported once, each mutant's drivers in a fork of it, so a ctypes segfault or a hang ends that
fork only and fails the check it happened in. One mutant is also graded through the real
runner, which must give the same verdicts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_mutants  # noqa: E402
from forked_checks import CheckServer  # noqa: E402

from pagedlab import graded as checks
from pagedlab.spec import manifest  # noqa: E402

TASKS = ["task1", "task2", "task3", "task4", "task5"]


@pytest.fixture(scope="module")
def server():
    found = CheckServer()
    yield found
    found.close()


@pytest.mark.parametrize("name", [m[0] for m in engine_mutants.MUTANTS])
def test_mutation_applies_to_current_solution(name):
    _, _, old, new = {m[0]: m for m in engine_mutants.MUTANTS}[name]
    text = engine_mutants.SOLUTION.read_text()
    assert text.count(old) == 1, f"mutant {name} no longer matches solutions/memory_manager.py"
    assert engine_mutants.apply(text, old, new, name) != text


def test_at_least_15_distinct_mutants():
    names = [m[0] for m in engine_mutants.MUTANTS]
    assert len(set(names)) == len(names) >= 15


def test_solution_passes_in_the_server(server, tmp_path):
    (tmp_path / "memory_manager.py").write_text(engine_mutants.SOLUTION.read_text())
    graded = server.grade(tmp_path, TASKS)
    assert len(graded) > 30 and all(passed for passed, _ in graded.values()), graded


def test_the_server_and_the_real_runner_agree_on_a_segfault(server, tmp_path):
    """A segfault in student code kills the checks' child process only: the run goes on, and the
    checks that segfaulted fail, the same ones whether graded by the server or the real runner."""
    folder = tmp_path / "wild_write_segfaults"
    engine_mutants.write_mutant("wild_write_segfaults", folder)
    served = {name: passed for (_, name), (passed, _) in server.grade(folder, ["task4"]).items()}
    real = {r.name: r.passed for r in checks.results("task4", str(folder))}
    assert set(served) == set(real), (served, real)
    ran = {name: passed for name, passed in real.items() if passed is not None}
    assert ran and not any(ran.values()) and all(served[name] == passed for name, passed in ran.items()), (served, real)
    # The real runner gives up after three identical crashes ("not run"); the server runs every
    # check, in a new fork after each crash, and the checks that never append pass.
    assert any(served.values()), served

def test_every_mutant_is_caught(server, tmp_path):
    outcomes = {}
    for name, *_ in engine_mutants.MUTANTS:
        folder = tmp_path / name
        engine_mutants.write_mutant(name, folder)
        outcomes[name] = [f"{task}: {check}" for (task, check), (passed, _) in server.grade(folder, TASKS).items()
                          if not passed]
    assert any(f.startswith("task4") for f in outcomes["wild_write_segfaults"]), outcomes["wild_write_segfaults"]
    print(json.dumps({name: failed[:2] for name, failed in outcomes.items()}, indent=1))
    survivors = [name for name, failed in outcomes.items() if not failed]
    assert not survivors, f"mutants not caught by any graded check: {survivors}"
    # Each costs only tasks that reach the function it edits: its own fence's task, or a task
    # whose functions call it (first-fit is called by create, fork and append).
    path = engine_mutants.SOLUTION
    fenced = engine_mutants.fenced_function_tasks(path)
    strays = []
    for name, _, old, _ in engine_mutants.MUTANTS:
        function = engine_mutants.function_at(path, old)
        allowed = engine_mutants.tasks_reaching(path, function) | ({fenced[function]} if function in fenced else set())
        failed = {task for task, check in (f.split(": ", 1) for f in outcomes[name])
                  if not manifest.BY_ID[task].is_feedback(check)}  # feedback-only checks cost nothing
        if not failed <= allowed:
            strays.append(f"{name} (in {function}): failed {sorted(failed)}, only {sorted(allowed)} reach it")
    assert not strays, "\n".join(strays)
