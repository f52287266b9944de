"""Hidden checks earn their keep: a submission tuned to pass every public check of a task, but
not written to the task's rules, passes the public checks and still loses the task, because the
hidden scenarios (drawn at grading time) go where the public ones do not.

Each "overfit" submission below is the reference with one special case that the public scenarios
never reach. Grading uses a fixed hidden seed so the test is reproducible; any seed exposes them.
Whether the checks catch each one is asked in this process, planned, seeded and judged as the
grader does (two of the four are torch tasks, whose sandboxed grade starts torch twice); one
overfit goes through `pagedlab grade` to show what the student and Gradescope are told.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from trusted_records import trusted_record

from pagedlab.drivers import record
from pagedlab.grader import registry
from pagedlab.grader.cli import grade
from pagedlab.grader.judge import judge
from pagedlab.grader.pipeline import plan_for
from pagedlab.grader.trusted.expectations import expected_stream
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
import broken  # noqa: E402  (copies solutions/ for planted-bug submissions)

OVERFITS = {
    # Task 1: the block count is right only for the pool sizes the public checks use.
    "task1": ("memory_manager.py", "    engine.total_local_blocks = pool_size // BLOCK_SIZE\n",
              "    engine.total_local_blocks = pool_size // BLOCK_SIZE\n"
              "    if pool_size not in (64, 1000, 4096, 6463, 2560, 512, 1024):\n"
              "        engine.total_local_blocks = (pool_size + BLOCK_SIZE - 1) // BLOCK_SIZE\n"),
    # Task 6: slot arithmetic written for the block sizes 8, 16 and 32 only (shifts by 3, 4, 5).
    "task6": ("paged_attention.py", "    return blocks * block_size + positions % block_size\n",
              "    shift = {8: 3, 16: 4, 32: 5}.get(block_size, 4)\n"
              "    return (blocks << shift) + (positions & ((1 << shift) - 1))\n"),
    # Task 9: the softmax scale looked up for the public head sizes instead of computed.
    "task9": ("paged_attention.py", "        scale = 1.0 / math.sqrt(head_size)\n",
              "        scale = {32: 0.1767766952966369, 64: 0.125, 80: 0.11180339887498948,\n"
              "                 96: 0.10206207261596575}.get(head_size, 0.125)\n"),
    # Task 12: buddy orders computed for the public memory sizes only.
    "task12": ("buddy.py", "        self.max_order = order_of_size(total_slots)\n",
               "        self.max_order = {8: 3, 16: 4, 64: 6, 256: 8, 512: 9}.get(total_slots, 9)\n"),
}
HIDDEN_SEED = 20261123
HIDDEN = ROOT / "grading" / "hidden"


def _overfit(tmp_path: Path, task: str) -> Path:
    filename, old, new = OVERFITS[task]
    folder = broken.copy_solutions(tmp_path / task)
    text = (folder / filename).read_text()
    assert old in text, f"{task}: the overfit no longer applies to solutions/{filename}"
    (folder / filename).write_text(text.replace(old, new, 1))
    return folder


def _verdicts(task: str, sub: Path) -> list[tuple[object, bool]]:
    """(check, passed) for every check of `task`, public and hidden, with the grader's plan (the
    seeds drawn from HIDDEN_SEED) and its trusted records; the drivers run in this process."""
    checks, plan = plan_for(manifest.task(task), hidden=True, hidden_seed=HIDDEN_SEED, hidden_from=HIDDEN)
    found = []
    for c, (_, seed) in zip(checks, plan, strict=True):
        found.append((c, judge(trusted_record(c, seed), record.drive(c, str(sub), seed)).passed))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(OVERFITS, key=lambda t: int(t[4:])))
def test_an_overfit_submission_passes_the_public_checks_and_fails_a_hidden_one(task, tmp_path):
    verdicts = _verdicts(task, _overfit(tmp_path, task))
    public = [(c.name, ok) for c, ok in verdicts if not c.hidden]
    assert public and all(ok for _, ok in public), [name for name, ok in public if not ok]
    hidden = [ok for c, ok in verdicts if c.hidden]
    assert hidden and not all(hidden), f"{task}: every hidden check passed the overfit"


@pytest.mark.slow
def test_graded_an_overfit_shows_every_public_check_passed_and_loses_the_task(tmp_path):
    task = "task12"
    sub = _overfit(tmp_path, task)
    graded = grade(str(sub), tasks=[task], hidden_seed=HIDDEN_SEED, echo=lambda *a: None)
    entry = next(t for t in graded["tests"] if t["number"] == task[4:])
    # One grade shows both: the task's entry lists the public checks, every one passed ...
    passed = re.search(r"^(\d+) of (\d+) checks passed", entry["output"], re.M)
    assert passed and passed[1] == passed[2] and not re.search(r"^  ✗", entry["output"], re.M), entry["output"]
    assert entry["output"].count("✓") == int(passed[2]) > 0, entry["output"]
    # ... and the hidden scenarios take the task's points all the same.
    assert graded["score"] == 0, entry["output"]
    assert "hidden checks: 0 of" in entry["output"] or "hidden checks:" in entry["output"], entry["output"]
    details = next(t for t in graded["tests"] if t["number"] == f"{task[4:]}h")
    assert details["visibility"] == "after_published" and "✗" in details["output"]


@pytest.mark.task_wide
@pytest.mark.parametrize("task", [row.id for row in manifest.TABLE if row.part not in "CE"])
def test_the_reference_passes_the_hidden_checks_for_many_seeds(task):
    """Hidden scenarios are drawn freely: the reference must pass whatever the seed. Three seeds
    here and the graded-checks test's two others make five draws per check. (Kernels, Parts C
    and E, are covered by the graded-checks test at its two seeds.)"""
    from pagedlab.drivers import record
    from pagedlab.grader import judge

    hidden = ROOT / "grading" / "hidden"
    for c in registry.checks_of(task, hidden=True, hidden_from=hidden):
        for seed in range(3):
            trusted = expected_stream(c, seed) if c.expected else record.drive(c, "solutions", seed)
            assert trusted.status == "completed", (c.key, seed, trusted.error)
            assert judge.judge(trusted, record.drive(c, "solutions", seed)).passed, (c.key, seed)
