"""The Gradescope package end to end: the zip built, unpacked in a temporary autograder root,
`setup.sh` run there (interpreter chosen for the sandbox user, venv, smoke grades, the answers
sealed root-only), then `run_autograder` on submissions whose code runs as a user the test creates.

The image is built once for the module. On it: the smoke submission's score, and
`GRADE_NOTEBOOKS=1` (`grade --notebooks`) on the reference with a planted bug, as the sandbox
user with every answer root-only: the graded cells get root's verdicts, the demos root's judge,
`--tasks` picks the notebooks. CI runs two notebooks (07: numeric expectations and the judge's
socket; 09: committed records); all twelve on the reference: benchmarks/bench_notebooks_sealed.py.

Root only (it installs packages and creates a user); minutes: marked integration.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest
from autograder_image import ROOT, USER, run_autograder, solutions, temporary_image

from pagedlab.grader import notebook_plan
from pagedlab.sandbox import private
from pagedlab.spec import manifest

SUBMITTED = ("memory_manager.py", "buddy.py")

pytestmark = [
    pytest.mark.integration,
    # its sandbox user runs notebooks and is swept between tasks, as the red team's (conftest.py)
    pytest.mark.xdist_group("users"),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser") or not shutil.which("apt-get"),
                       reason="needs root, runuser and apt-get (it runs Gradescope's setup.sh)"),
]


@pytest.fixture(scope="module")
def image():
    with temporary_image() as found:
        yield found


@pytest.mark.task_wide
def test_the_package_sets_up_and_grades_in_a_temporary_root_as_a_created_user(image):
    autograder, env = image
    assert pwd.getpwnam(USER), "setup.sh created the sandbox user"
    base = Path(os.path.realpath(autograder / "venv" / "bin" / "python"))
    assert subprocess.run(["runuser", "-u", USER, "--", str(base), "-c", "pass"], cwd="/").returncode == 0
    results, done = run_autograder(autograder, env, {n: (ROOT / "solutions" / n).read_text() for n in SUBMITTED})
    expected = sum(t.points for t in manifest.TABLE if set(t.files) <= set(SUBMITTED))
    assert results["score"] == expected, ([(t["name"], t["output"][-1500:]) for t in results["tests"]
                                           if t["score"] != t["max_score"]], done.stderr[-2000:])
    assert "autograder problem" not in json.dumps(results)
    assert "llm_memory.c" not in results["output"]


def _notebooks(results: dict) -> dict[str, dict]:
    return {t["name"].split()[1]: t for t in results["tests"] if t["name"].startswith("Notebook ")}


def test_grade_notebooks_in_the_sealed_image_passes_the_reference_and_fails_a_planted_bug_at_its_cell(image):
    """`GRADE_NOTEBOOKS=1 run_autograder --tasks 9,12`, as the sandbox user, with every answer
    root-only as setup.sh left them, on the reference with one bug planted in Task 12 (a buddy
    never merges on free). `--tasks` runs only the two notebooks of those tasks:
    - 07 (Tasks 6, 8, 9: numeric expectations judged by root; its demos' dense attention and
      token checks answered by root's judge) passes, as every notebook does on the reference
      (all twelve: benchmarks/bench_notebooks_sealed.py);
    - 09 (Tasks 11, 12: committed records) passes Task 11's graded cell and fails at Task 12's,
      named by number and first line with the error's last line: the verdict is root's, so it
      cannot be skipped."""
    autograder, env = image
    assert private.exposed(autograder / "source") == []  # the kernel can read no answer
    merge = "                break  # the buddy is in use (whole or in part): no merge\n"
    planted = solutions({"buddy.py": (merge, merge.replace("no merge\n", "no merge\n            break\n"))})
    # (--no-hidden: the hidden checks are the grade's business, graded in test_grading_real; ~4 CPU-s)
    results, done = run_autograder(autograder, env, planted, "--tasks", "9,12", "--no-hidden", notebooks=True)
    ran = _notebooks(results)
    assert sorted(ran) == ["07_paged_attention_torch.ipynb", "09_prefix_caching_and_utilization.ipynb"], done.stdout[-3000:]
    assert "not run: 00_welcome, 01_kv_cache_size" in done.stdout
    by_task = {t.get("number"): t for t in results["tests"]}
    assert by_task["9"]["score"] == manifest.task("9").points and by_task["12"]["score"] == 0
    # Tasks 6 and 8 (07's require cells) were judged for the notebook, as the sandbox user
    assert "public checks, no points: ✓ task6, ✓ task8" in done.stdout, done.stdout[-3000:]
    assert ran["07_paged_attention_torch.ipynb"]["status"] == "passed", ran["07_paged_attention_torch.ipynb"]["output"]

    failed = ran["09_prefix_caching_and_utilization.ipynb"]
    cells = notebook_plan.code_cells(ROOT / "notebooks" / "09_prefix_caching_and_utilization.ipynb")
    cell = next(c for c in cells if c.graded and "task12" in c.tasks)
    first = failed["output"].splitlines()[0]
    assert failed["status"] == "failed"
    assert first.startswith(f"code cell {cell.number} `{cell.first_line}`: CheckFailure: "), failed["output"]
    assert " checks did not pass for Task 12 · " in first, first
    line = next(line for line in done.stdout.splitlines() if line.startswith("✗ notebook 09_"))
    assert line.endswith(f"s): {first}"), line
    assert "autograder problem" not in json.dumps(results)
