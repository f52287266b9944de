"""The class report ranks the bugs worth a lecture above the stubs nobody has started.

A class of seven on Task 12 (the buddy allocator): four students left the stub, one is honest,
two share a real bug (the buddy found by addition instead of XOR). Counted naively, every row of
"failed most often" was a stub's "not implemented yet" and the bug never showed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pagedlab.grading import class_report

ROOT = Path(__file__).resolve().parent.parent
BUG = ("buddy = offset ^ (1 << order)", "buddy = offset + (1 << order)")


def _class(src: Path) -> None:
    solution = (ROOT / "solutions" / "buddy.py").read_text()
    assert solution.count(BUG[0]) == 1
    texts = {"honest": solution, "buggy_1": solution.replace(*BUG), "buggy_2": solution.replace(*BUG)}
    texts.update({f"stub_{i}": (ROOT / "exercises" / "buddy.py").read_text() for i in range(4)})
    for key, text in texts.items():
        (src / key).mkdir(parents=True)
        (src / key / "buddy.py").write_text(text)


def test_the_real_bug_tops_the_report_and_stubs_are_counted_apart(tmp_path):
    _class(tmp_path / "in")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "pagedlab", "grade-class", str(tmp_path / "in"), "--out",
                           str(out), "--tasks", "12", "--no-hidden"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    records = class_report.collect(out)
    summary = class_report.summarize(records)
    assert summary.not_attempted == {"task12": [f"stub_{i}" for i in range(4)]}
    task, check, students, why = summary.top_failures[0]
    assert (task, students) == ("task12", 2), summary.top_failures
    buggy = {c for r in records if r.key == "buggy_1" for _, c, _ in r.failures}
    assert check in buggy and why, (check, why)
    assert all(n <= 2 for _, _, n, _ in summary.top_failures), "no stub row among the real failures"
    assert "not implemented" not in " ".join(w for *_, w in summary.top_failures)

    text = class_report.terminal_text(records, summary, [])
    ranking = text.split("real failures, most students first")[1]
    assert ranking.splitlines()[1].startswith("  task12    2  "), text
    assert "not attempted (the stub still in place), students per task: task12 4" in text
    page = (out / "report.html").read_text()
    assert "Real failures" in page and "Not attempted" in page and "stub_3" in page


def test_a_kernel_stub_left_in_place_is_not_attempted_though_its_message_is_a_wrong_output():
    """A .cu stub leaves the output unwritten, so its checks fail on values, not with "not
    implemented yet": the untouched file is what shows the student never started."""
    stub = class_report.Record("k", status="graded", untouched={"paged_attention.cu"},
                               failures=[("task10", "decode matches dense attention", "out[0, 0] is NaN")])
    edited = class_report.Record("e", status="graded",
                                 failures=[("task10", "decode matches dense attention", "out[0, 0] is NaN")])
    assert stub.not_attempted() == {"task10"} and edited.not_attempted() == set()
    summary = class_report.summarize([stub, edited])
    assert summary.not_attempted == {"task10": ["k"]}
    assert [(t, n) for t, _, n, _ in summary.top_failures] == [("task10", 1)]
