"""The class report ranks the bugs worth a lecture above the stubs nobody has started.

A class of seven on Task 12 (the buddy allocator): four students left the stub, one is honest,
two share a real bug (the buddy found by addition instead of XOR). Counted naively, every row of
"failed most often" was a stub's "not implemented yet" and the bug never showed.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from pagedlab.grader import class_queue, class_report

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
    task, check, students, why = summary.failures[0]
    assert (task, students) == ("task12", 2), summary.failures
    buggy = {c for r in records if r.key == "buggy_1" for _, c, _ in r.failures}
    assert check in buggy and why, (check, why)
    assert all(n <= 2 for _, _, n, _ in summary.failures), "no stub row among the real failures"
    assert "not implemented" not in " ".join(w for *_, w in summary.failures)

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
    assert [(t, n) for t, _, n, _ in summary.failures] == [("task10", 1)]


def _results(tasks: dict) -> dict:
    """A results.json with one failed test per task: {task number: [(check, explanation), ...]}."""
    return {"score": 0, "tests": [
        {"number": n, "score": 0, "max_score": 4, "status": "failed",
         "output": "0/4 points\n" + "".join(f"  ✗ {check}\n      {why}\n" for check, why in failed)}
        for n, failed in tasks.items()]}


def _put(out: Path, key: str, results: dict | None, files: dict) -> None:
    folder = out / "students" / key
    (folder / "files").mkdir(parents=True)
    for name, text in files.items():
        (folder / "files" / name).write_text(text)
    if results is not None:  # with the state a grading of this key writes
        (folder / "results.json").write_text(json.dumps(results))
        (folder / "state.json").write_text(json.dumps({"status": "graded", "key": key, "grader": "v"}))


def test_a_file_that_does_not_load_is_one_cause_every_failure_is_listed_and_empty_is_not_graded(tmp_path):
    """One syntax error fails every check of Tasks 1 and 2 (the real grader's messages): one row,
    the file's. Eighteen real failures: the terminal shows 15 and says how many more, the page all.
    An empty folder and a missing results.json each get their own status."""
    from pagedlab.grader.cli import grade

    broken = tmp_path / "broken"
    broken.mkdir()
    solution = (ROOT / "solutions" / "memory_manager.py").read_text()
    assert solution.count("def llm_init(pool_addr, pool_size):") == 1
    (broken / "memory_manager.py").write_text(solution.replace("def llm_init(pool_addr, pool_size):",
                                                               "def llm_init(pool_addr, pool_size)"))
    graded = grade(str(broken), tasks=["1", "2"], hidden=False, echo=lambda *a: None)
    out = tmp_path / "out"
    _put(out, "syntax_error", graded, {"memory_manager.py": "..."})
    _put(out, "module_level_error", _results({"12": [
        ("a hand-traced sequence of splits and merges", "your code raised NameError: name 'x' is not "
         "defined at buddy.py:109 (<module>): y = x + 1")]}), {"buddy.py": "..."})
    for i in range(17):
        _put(out, f"bug_{i:02}", _results({"6": [(f"slot check {i}", f"slot {i} differs")]}), {"paged_attention.py": "..."})
    _put(out, "empty_folder", None, {})
    _put(out, "never_graded", None, {"buddy.py": "..."})
    class_queue.write(out, [p.name for p in sorted((out / "students").iterdir())], None, True)
    # Each student was graded on other tasks (hand-made results): merged as they are, told to.
    assert class_report.build(out, echo=lambda *a: None, partial=True, allow_mixed=True) == 0

    records = class_report.collect(out)
    by_key = {r.key: r for r in records}
    assert by_key["syntax_error"].failures == [] and list(by_key["syntax_error"].unloadable) == ["memory_manager.py"]
    summary = class_report.summarize(records)
    rows = {(t, c): (n, why) for t, c, n, why in summary.failures}
    assert len(rows) == 19 and not any(t in ("task1", "task2") for t, _ in rows), rows
    n, why = rows["memory_manager.py", class_report.DOES_NOT_LOAD]
    assert n == 1 and why.startswith("SyntaxError: expected ':' at line ") and "loader" not in why, why
    assert "same error" not in why, why
    assert rows["buddy.py", class_report.DOES_NOT_LOAD] == (
        1, "NameError: name 'x' is not defined at buddy.py:109 (<module>): y = x + 1")

    text = class_report.terminal_text(records, summary, [])
    ranking = text.split("real failures, most students first")[1]
    assert ranking.count(" 1  ") == class_report.TOP_FAILURES and "... 4 more failing checks" in ranking, text
    page = (out / "report.html").read_text()
    assert all(f"slot check {i}<" in page for i in range(17)) and page.count(class_report.DOES_NOT_LOAD) == 2

    assert text.splitlines()[0] == ("21 students: 19 graded, 1 empty (no file submitted, 0 points), "
                                    "0 grader problems, 1 not graded yet")
    with open(out / "grades.csv", newline="") as f:
        csv_rows = {r["key"]: r for r in csv.DictReader(f)}
    assert (csv_rows["empty_folder"]["status"], csv_rows["empty_folder"]["total"]) == ("empty", "0")
    assert (csv_rows["never_graded"]["status"], csv_rows["never_graded"]["total"]) == ("missing", "")
    assert "Empty submissions (no file to grade, 0 points): empty_folder" in page


def test_grade_class_does_not_grade_an_empty_folder_and_reports_it_empty(tmp_path):
    from pagedlab.grader import classroom

    (tmp_path / "in" / "ann").mkdir(parents=True)
    (tmp_path / "in" / "ann" / "notes.txt").write_text("no code yet")
    (tmp_path / "in" / "bob").mkdir()
    out = tmp_path / "out"
    said = []
    students = classroom.prepare(tmp_path / "in", out, echo=said.append)
    states = classroom.grade_all(students, out, jobs=1, tasks=["12"], hidden=False, echo=said.append)
    assert {k: s["status"] for k, s in states.items()} == {"ann": "empty", "bob": "empty"}
    assert not (out / "students" / "ann" / "grade.log").exists()  # no grading process started
    assert "2 empty (no file to grade: ann, bob)" in said[0]
    assert [r.status for r in class_report.collect(out)] == ["empty", "empty"]
