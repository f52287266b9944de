"""Every planted bug in tests/engine_mutants.py is caught by the HW3 graded checks.

Each mutant runs in its own interpreter (a ctypes segfault or a hang must not take pytest down,
and counts as caught); two run at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_mutants  # noqa: E402

RUNNER = Path(engine_mutants.__file__)
TIMEOUT_S = 60


@pytest.mark.parametrize("name", [m[0] for m in engine_mutants.MUTANTS])
def test_mutation_applies_to_current_solution(name):
    _, _, old, new = {m[0]: m for m in engine_mutants.MUTANTS}[name]
    text = engine_mutants.SOLUTION.read_text()
    assert text.count(old) == 1, f"mutant {name} no longer matches solutions/memory_manager.py"
    assert engine_mutants.apply(text, old, new, name) != text


def test_at_least_15_distinct_mutants():
    names = [m[0] for m in engine_mutants.MUTANTS]
    assert len(set(names)) == len(names) >= 15


def _run(folder: Path) -> tuple[str, dict | None]:
    try:
        proc = subprocess.run([sys.executable, str(RUNNER), "--run", str(folder)], capture_output=True,
                              text=True, timeout=TIMEOUT_S, cwd=engine_mutants.ROOT)
    except subprocess.TimeoutExpired:
        return "timeout", None
    if proc.returncode != 0:
        return f"crashed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}", None
    return "ran", json.loads(proc.stdout.strip().splitlines()[-1])


def test_solution_passes_in_the_runner(tmp_path):
    (tmp_path / "memory_manager.py").write_text(engine_mutants.SOLUTION.read_text())
    how, result = _run(tmp_path)
    assert how == "ran" and result["failed"] == [] and result["passed"] > 30, (how, result)


def test_every_mutant_is_caught(tmp_path):
    folders = {}
    for name, *_ in engine_mutants.MUTANTS:
        folders[name] = tmp_path / name
        engine_mutants.write_mutant(name, folders[name])
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = dict(zip(folders, pool.map(_run, folders.values()), strict=True))
    # A segfault in student code kills the checks' child process only: the run goes on, and the
    # checks that segfaulted fail.
    how, result = outcomes["wild_write_segfaults"]
    assert how == "ran" and any(f.startswith("task4") for f in result["failed"]), outcomes["wild_write_segfaults"]
    survivors = [name for name, (how, result) in outcomes.items() if how == "ran" and not result["failed"]]
    report = {name: (how if result is None else result["failed"][:2]) for name, (how, result) in outcomes.items()}
    print(json.dumps(report, indent=1))
    assert not survivors, f"mutants not caught by any graded check: {survivors}"
