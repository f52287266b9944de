"""`pagedlab grade-class` and `pagedlab class-report`: a whole class graded, resumed, reported.

The quick tests cover the intake (a hostile zip, Gradescope's export), grader problems kept
apart, and the Slurm recipe's merge (results out of order, some missing). The integration test
grades a generated class of 9 (tests/submissions/classroom.py) with `--jobs 2` on tasks
1, 11, 12 and 13 (one per file, none needing torch or a kernel build: the batch runs the same
`pagedlab grade` per student whatever the task), public checks only, interrupted once with SIGINT.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pagedlab.grader import class_queue, class_report, classroom, intake, submission
from pagedlab.spec import points

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
import classroom as fake_class  # noqa: E402  (tests/submissions/classroom.py)

PAGEDLAB = [sys.executable, "-m", "pagedlab"]


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _pagedlab(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(PAGEDLAB + [str(a) for a in args], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, **kw)


def _csv(path: Path) -> dict[str, dict]:
    return {row["key"]: row for row in csv.DictReader(io.StringIO(path.read_text()))}


# --- intake -----------------------------------------------------------------------------------

def _zip_member(zf, name, data=b"", mode=0o100644):
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    zf.writestr(info, data)


def test_a_class_zip_never_writes_outside_its_folder_nor_follows_links(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        _zip_member(zf, "../escaped/memory_manager.py", b"x = 1\n")
        _zip_member(zf, "/abs/memory_manager.py", b"x = 1\n")
        _zip_member(zf, "sam/memory_manager.py", b"/work/main/solutions/memory_manager.py", mode=0o120777)
        _zip_member(zf, "tom/buddy.py", b"#" * (submission.MAX_FILE_BYTES + 1))
        _zip_member(zf, "uma/buddy.py", b"BUDDY = 1\n")
        _zip_member(zf, "uma/notes.txt", b"not a course file\n")
    dest = tmp_path / "unpacked"
    found = intake.discover(archive, dest)
    assert [s.key for s in found.students] == ["sam", "tom", "uma"]  # refused files, kept students
    assert not (tmp_path / "escaped").exists() and not Path("/abs/memory_manager.py").exists()
    refusals = "\n".join(found.refused)
    for words in ("../escaped/memory_manager.py: a path with '..'", "/abs/memory_manager.py: an absolute path",
                  "sam/memory_manager.py: a symbolic link", "tom/buddy.py: 1.0 MB, over"):
        assert words in refusals
    assert sorted(p.name for p in (dest / "sam").iterdir()) == []
    assert sorted(p.name for p in (dest / "tom").iterdir()) == []
    assert sorted(p.name for p in (dest / "uma").iterdir()) == ["buddy.py"]  # notes.txt not taken
    assert not any(stat.S_ISLNK(os.lstat(p).st_mode) for p in dest.rglob("*"))
    again = intake.discover(archive, dest)  # a rerun unpacks afresh: same students, same refusals
    assert [s.key for s in again.students] == ["sam", "tom", "uma"] and again.refused == found.refused


METADATA = """\
submission_111:
  :submitters:
  - :name: Ada Lovelace
    :sid: '001'
    :email: ada@example.edu
  :created_at: 2026-11-20 10:00:00.000000000 -08:00
  :score: !ruby/object:BigDecimal 18:0.37e2
submission_222:
  :submitters:
  - :name: Alan Turing
    :email: alan@example.edu
  - :name: Grace Hopper
    :email: grace@example.edu
  :score: 0.0
"""


def test_a_gradescope_export_names_each_student_from_its_metadata(tmp_path):
    export = tmp_path / "assignment_123_export"
    for sub in ("submission_111", "submission_222"):
        (export / sub).mkdir(parents=True)
        (export / sub / "buddy.py").write_text("X = 1\n")
    (export / "submission_metadata.yml").write_text(METADATA)
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(export.rglob("*")):
            zf.write(path, path.relative_to(tmp_path))
    found = intake.discover(archive, tmp_path / "unpacked")  # one wrapper folder: stepped into
    people = {s.key: (s.name, s.email) for s in found.students}
    assert people == {"submission_111": ("Ada Lovelace", "ada@example.edu"),
                      "submission_222": ("Alan Turing; Grace Hopper", "alan@example.edu; grace@example.edu")}


def test_a_zip_graded_with_relative_paths_then_regraded_only_where_a_file_changed(tmp_path):
    archive = tmp_path / "class.zip"

    def write_zip(amy_text: str) -> None:
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("github-classroom/amy/exercises/buddy.py", amy_text)
            zf.writestr("github-classroom/ben/buddy.py", (ROOT / "solutions" / "buddy.py").read_text())

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(PAGEDLAB + ["grade-class", "class.zip", "--out", "out", "--jobs", "2",
                                          "--tasks", "12", "--no-hidden"],
                              capture_output=True, text=True, env=_env(), cwd=tmp_path)

    write_zip((ROOT / "exercises" / "buddy.py").read_text())
    first = run()
    assert first.returncode == 0, first.stdout + first.stderr
    rows = _csv(tmp_path / "out" / "grades.csv")
    assert {k: r["total"] for k, r in rows.items()} == {"amy": "0", "ben": "4"}
    write_zip((ROOT / "solutions" / "buddy.py").read_text())  # amy resubmits
    second = run()
    assert "1 already graded by this grader version (unchanged files, skipped), 1 to grade" in second.stdout
    assert {k: r["total"] for k, r in _csv(tmp_path / "out" / "grades.csv").items()} == {"amy": "4", "ben": "4"}


def test_one_submission_instead_of_a_class_is_refused_with_the_right_command(tmp_path):
    (tmp_path / "buddy.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="pagedlab grade --impl"):
        intake.discover(tmp_path, tmp_path / "unpacked")


def test_the_one_submission_command_carries_tasks_and_hidden_choices(tmp_path):
    cmd = classroom.grade_command(tmp_path, tmp_path / "r.json", ["1", "6"], False)
    assert cmd[1:5] == ["-m", "pagedlab", "grade", "--impl"] and cmd[-3:] == ["--tasks", "1,6", "--no-hidden"]
    assert classroom.grade_command(tmp_path, tmp_path / "r.json", None, "/h")[-2:] == ["--hidden", "/h"]
    assert "--hidden" not in classroom.grade_command(tmp_path, tmp_path / "r.json", None, True)


# --- grader problems are not student failures -------------------------------------------------

def _student(out: Path, key: str, results: dict | None = None, state: dict | None = None) -> None:
    folder = out / "students" / key
    (folder / "files").mkdir(parents=True)
    (folder / "files" / "memory_manager.py").write_text("x = 1\n")
    if results is not None:
        (folder / "results.json").write_text(json.dumps(results))
    if state is not None:
        (folder / "state.json").write_text(json.dumps(state))


def _graded(key: str, tasks=("1",), hidden=False, grader="v1") -> dict:
    """The state.json a grading of `key` writes (the merge reads a grade only with it)."""
    return {"status": "graded", "key": key, "grader": grader, "options": class_queue.options(list(tasks), hidden)}


def test_grader_problems_are_logged_apart_from_student_failures(tmp_path):
    failed_task = {"number": "1", "score": 0, "max_score": 8, "status": "failed",
                   "output": "0/8 points\n  ✗ llm_init counts whole blocks\n      crashed with SIGSEGV: segfault\n"}
    _student(tmp_path, "crashed_student", {"score": 0, "tests": [failed_task]}, _graded("crashed_student"))
    _student(tmp_path, "bad_check", {"score": 0, "tests": [dict(failed_task, output="0/8\n\nautograder problem, "
                                                                "not your code (tell your instructor): loading the checks failed",
                                                                extra_data={"grader_problem": "loading the checks failed"})]},
             _graded("bad_check"))
    _student(tmp_path, "grader_died", {"score": 0, "tests": [], "output": "The pagedlab autograder itself failed"},
             _graded("grader_died"))
    _student(tmp_path, "timed_out", state={"status": "grader problem", "problem": "the grading process itself ran over"})
    _student(tmp_path, "never_ran")
    keys = ["bad_check", "crashed_student", "grader_died", "never_ran", "timed_out"]
    class_queue.write(tmp_path, keys, ["1"], False)
    assert class_report.build(tmp_path, echo=lambda *a: None, partial=True) == 0
    rows = _csv(tmp_path / "grades.csv")
    assert {k: r["status"] for k, r in rows.items()} == {
        "bad_check": "graded", "crashed_student": "graded", "grader_died": "grader problem",
        "never_ran": "missing", "timed_out": "grader problem"}
    log = (tmp_path / class_report.PROBLEMS_LOG).read_text()
    assert "crashed_student" not in log  # a student's crash is theirs, not the grader's
    for key in ("bad_check: task1: autograder problem", "grader_died", "timed_out", "never_ran: not graded yet"):
        assert key in log


def test_a_merge_refuses_students_not_graded_yet_and_grades_made_otherwise(tmp_path):
    full = {"number": "1", "score": 8, "max_score": 8, "status": "passed", "output": "8/8"}
    both = [full, dict(full, number="12", score=4, max_score=4)]
    keys = ["ann", "ben", "cat", "dan", "eve", "fay"]
    class_queue.write(tmp_path, keys, ["1", "12"], False)
    _student(tmp_path, "ann", {"score": 12, "tests": both}, _graded("ann", ("1", "12")))
    _student(tmp_path, "ben")  # being graded right now: no state, no results yet
    # A stale folder's grade with other tasks: out of 8 beside out of 12.
    _student(tmp_path, "cat", {"score": 8, "tests": [full]}, _graded("cat", ("1",)))
    # Results written for another key (a rewritten queue's line grading into a classmate's folder).
    _student(tmp_path, "dan", {"score": 12, "tests": both}, _graded("mallory", ("1", "12")))
    _student(tmp_path, "eve", {"score": 12, "tests": both}, _graded("eve", ("1", "12")))
    _student(tmp_path, "fay", {"score": 12, "tests": both})  # results.json and no state: its job died between
    (tmp_path / "grades.csv").write_text("an earlier merge's grades\n")
    said = []
    assert class_report.build(tmp_path, echo=said.append) == class_report.REFUSED
    text = "\n".join(said)
    assert not (tmp_path / "grades.csv").exists()  # the stale merge is not left to be mistaken for this one
    assert "incomplete: 2 not graded yet (array indices 1,5): ben (1), fay (5)" in text
    assert f"sbatch --array=1,5%50 --output={tmp_path}/logs/%A_%a.log --open-mode=append " \
           f"{ROOT}/grading/slurm/grade_array.sbatch {tmp_path}" in text
    assert "mixed: 2 graded otherwise" in text and "array indices 2-3" in text
    assert "cat (2): graded with --tasks 1 --no-hidden" in text and "dan (3): its grade was written for another key" in text
    assert "sbatch --array=2-3%50" in text
    # Told to, it merges, and says what it merged.
    said.clear()
    assert class_report.build(tmp_path, echo=said.append, partial=True, allow_mixed=True) == 0
    rows = _csv(tmp_path / "grades.csv")
    assert [rows[k]["status"] for k in keys] == ["graded", "missing", "graded", "graded", "graded", "missing"]
    assert "merged as missing (--partial)" in "\n".join(said)
    # Two grader versions among otherwise equal grades are mixed too (a check fixed mid-array).
    (tmp_path / "students" / "eve" / "state.json").write_text(json.dumps(_graded("eve", ("1", "12"), grader="v2")))
    for key in ("ben", "fay"):
        (tmp_path / "students" / key / "results.json").write_text(json.dumps({"score": 12, "tests": both}))
        (tmp_path / "students" / key / "state.json").write_text(json.dumps(_graded(key, ("1", "12"), grader="v2")))
    for key in ("cat", "dan"):
        (tmp_path / "students" / key / "state.json").write_text(json.dumps(_graded(key, ("1", "12"))))
        (tmp_path / "students" / key / "results.json").write_text(json.dumps({"score": 12, "tests": both}))
    said.clear()
    assert class_report.build(tmp_path, echo=said.append) == class_report.REFUSED
    assert "another grader version" in "\n".join(said)
    (tmp_path / "students" / "eve" / "state.json").write_text(json.dumps(_graded("eve", ("1", "12"))))
    for key in ("ben", "fay"):
        (tmp_path / "students" / key / "state.json").write_text(json.dumps(_graded(key, ("1", "12"))))
    said.clear()
    assert class_report.build(tmp_path, echo=said.append) == 0, said
    assert {r["total"] for r in _csv(tmp_path / "grades.csv").values()} == {"12"}


def test_a_grading_process_over_its_own_time_limit_is_a_grader_problem(tmp_path, monkeypatch):
    src = tmp_path / "in"
    (src / "ann").mkdir(parents=True)
    (src / "ann" / "buddy.py").write_text((ROOT / "solutions" / "buddy.py").read_text())
    out = tmp_path / "out"
    students = classroom.prepare(src, out, echo=lambda *a: None)
    monkeypatch.setattr(classroom, "grading_timeout", lambda tasks: 0.3)  # python starts slower
    states = classroom.grade_all(students, out, jobs=1, tasks=["12"], hidden=False, echo=lambda *a: None)
    assert states["ann"]["status"] == "grader problem"
    assert "ran over" in states["ann"]["problem"]


# --- beyond one machine: the Slurm recipe -----------------------------------------------------

SBATCH = ROOT / "grading" / "slurm" / "grade_array.sbatch"


def _array_index(out: Path, index: int, **env) -> subprocess.CompletedProcess:
    """What one index of `sbatch --array` runs: the script, with DIR as its argument, from the
    course checkout (as an instructor would submit it), with the node's environment `env`."""
    return subprocess.run(["bash", str(SBATCH), str(out)], env=_env(SLURM_ARRAY_TASK_ID=str(index), **env),
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def _queue_length(out: Path) -> int:
    return int(subprocess.run(["bash", "-c", f'wc -l < "{out}/queue.txt"'], capture_output=True, text=True).stdout)


def test_a_folder_name_cannot_add_a_line_to_the_queue_or_grade_into_a_classmate(tmp_path):
    # The red team's attack: folder names with a newline and a tab. On the old queue (key TAB upload
    # folder, one per line, graded from the upload's path) the first added a line that graded
    # ./exercises into alice's folder (honest alice 4/4 -> 0/4), the second graded the
    # instructor's ./solutions into mallory's (0/4 -> 4/4), and the array had 5 indices for 3 students.
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("alice/buddy.py", (ROOT / "solutions" / "buddy.py").read_text())
        zf.writestr("mallory/buddy.py", (ROOT / "exercises" / "buddy.py").read_text())
        zf.writestr("z\nalice\texercises/buddy.py", "X = 1\n")
        zf.writestr("z\nmallory\tsolutions/buddy.py", "X = 1\n")
    out = tmp_path / "out"
    prepared = _pagedlab("grade-class", archive, "--out", out, "--prepare-only", "--tasks", "12", "--no-hidden")
    assert prepared.returncode == 0, prepared.stderr
    keys = (out / "queue.txt").read_text().splitlines()
    assert keys == ["alice", "mallory", "z_alice_exercises", "z_mallory_solutions"]
    count = _queue_length(out)  # the recipe's array size
    assert count == 4
    for index in range(count):  # every index the recipe's array runs
        assert _array_index(out, index).returncode == 0
    report = _pagedlab("class-report", out)
    assert report.returncode == 0, report.stdout + report.stderr
    rows = _csv(out / "grades.csv")
    assert {k: r["total"] for k, r in rows.items()} == {"alice": "4", "mallory": "0", "z_alice_exercises": "0",
                                                        "z_mallory_solutions": "0"}
    # A line added by hand (a queue rewritten after the prepare step) is refused by index and merge.
    with open(out / "queue.txt", "a") as queue:
        queue.write("alice\n")
    assert _array_index(out, 4).returncode == 2
    refused = _pagedlab("class-report", out)
    assert refused.returncode == 2 and "is not the queue the prepare step wrote" in refused.stdout


def test_a_slurm_array_out_of_order_with_gaps_merges_only_once_every_index_is_graded(tmp_path):
    src = tmp_path / "in"
    solution = (ROOT / "solutions" / "buddy.py").read_text()
    stub = (ROOT / "exercises" / "buddy.py").read_text()
    for key, text in (("a_solution", solution), ("b_stub", stub), ("c_solution", solution), ("d_stub", stub)):
        (src / key).mkdir(parents=True)
        (src / key / "buddy.py").write_text(text)
    out = tmp_path / "out"
    done = _pagedlab("grade-class", src, "--out", out, "--prepare-only", "--tasks", "12,13", "--no-hidden")
    assert done.returncode == 0, done.stderr
    assert "sbatch --array=0-3%50" in done.stdout
    # The nodes' environment says other things (the old recipe's GRADE_ARGS; a time scale that
    # would time every task out): the options the prepare step wrote win.
    node = {"GRADE_ARGS": "--tasks 1", "PAGEDLAB_GRADE_TIME_SCALE": "0.001"}
    # Indices in the order the nodes finish; 1 lost (a node died), 7 past the end of the class.
    codes = {index: _array_index(out, index, **node) for index in (3, 0, 2, 7)}
    assert {i: c.returncode for i, c in codes.items()} == {3: 0, 0: 0, 2: 0, 7: 2}, codes[7].stdout
    assert "index 7 is past the end of the queue" in codes[7].stdout
    assert "index 0 of 4 is student a_solution" in codes[0].stdout and "--tasks 12,13 --no-hidden" in codes[0].stdout
    report = _pagedlab("class-report", out)
    assert report.returncode == class_report.REFUSED, report.stdout + report.stderr
    assert "incomplete: 1 not graded yet (array indices 1): b_stub (1)" in report.stdout
    rerun = class_queue.sbatch_line(out, [1])
    assert rerun in report.stdout and not (out / "grades.csv").exists()
    # The lost index, run again, completes the report.
    assert _array_index(out, 1, **node).returncode == 0
    report = _pagedlab("class-report", out)
    assert report.returncode == 0, report.stdout
    rows = _csv(out / "grades.csv")
    assert list(rows) == ["a_solution", "b_stub", "c_solution", "d_stub"]  # the queue's order
    assert [(r["status"], r["total"], r["max"], r["task12"]) for r in rows.values()] == [
        ("graded", "4", "9", "4"), ("graded", "0", "9", "0"), ("graded", "4", "9", "4"), ("graded", "0", "9", "0")]
    # Each index's log is appended to, headed by its run: a second run of index 0 (a requeue)
    # keeps the first; an index already graded by this grader is kept, not graded twice.
    again = _array_index(out, 0)
    assert "already graded by this grader version" in again.stdout
    log = (out / "students" / "a_solution" / "grade.log").read_text()
    assert log.startswith("=== ") and "pagedlab grade-index 0: job -_0" in log
    # The same folder prepared again with other tasks and partly regraded: out of 12 beside out
    # of 9 is refused, and the line that regrades the rest is printed.
    done = _pagedlab("grade-class", src, "--out", out, "--prepare-only", "--tasks", "1,12", "--no-hidden")
    assert _array_index(out, 0).returncode == 0
    report = _pagedlab("class-report", out)
    assert report.returncode == class_report.REFUSED
    assert "mixed: 3 graded otherwise than this folder's options (--tasks 1,12 --no-hidden" in report.stdout
    assert "b_stub (1): graded with --tasks 12,13 --no-hidden" in report.stdout
    assert class_queue.sbatch_line(out, [1, 2, 3]) in report.stdout


# --- a whole class ----------------------------------------------------------------------------

TIME_SCALE = "0.3"  # the hang (asleep) waits 0.3 x task 1's 30 s; every task, solution included, fits


def _states(out: Path) -> dict[str, float]:
    return {p.parent.name: p.stat().st_mtime for p in (out / "students").glob("*/state.json")}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    base = tmp_path_factory.mktemp("class")
    kinds = fake_class.make_class(base / "in")
    out = base / "out"
    cmd = PAGEDLAB + ["grade-class", str(base / "in"), "--out", str(out), "--jobs", "2",
                      "--tasks", ",".join(fake_class.TASKS), "--no-hidden"]
    env = _env(PAGEDLAB_GRADE_TIME_SCALE=TIME_SCALE)
    with open(base / "first.log", "w") as log:
        first = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.monotonic() + 600
        while len(_states(out)) < 3 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        first.send_signal(signal.SIGINT)
        first_rc = first.wait(timeout=120)
    before = _states(out)
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    return {"base": base, "out": out, "kinds": kinds, "env": env, "first_rc": first_rc, "before": before,
            "first_log": (base / "first.log").read_text(), "second": second}


@pytest.mark.integration
@pytest.mark.xdist_group("graded-class")  # one worker grades the class once (conftest.py)
def test_an_interrupted_run_resumes_with_only_the_rest(graded_class):
    g = graded_class
    assert g["first_rc"] == 130, g["first_log"]
    assert "interrupted" in g["first_log"]
    before, second = g["before"], g["second"]
    assert second.returncode == 0, second.stdout + second.stderr
    assert 3 <= len(before) < len(g["kinds"])
    assert (f"{len(before)} already graded by this grader version (unchanged files, skipped), "
            f"{len(g['kinds']) - len(before)} to grade") in second.stdout
    after = _states(g["out"])
    assert set(after) == set(g["kinds"])
    assert all(after[k] == t for k, t in before.items())  # nothing graded twice
    # No grading process of this class outlived the interrupt (each ran in its own session).
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(g["base"] / "in") not in running


@pytest.mark.integration
@pytest.mark.xdist_group("graded-class")  # one worker grades the class once (conftest.py)
def test_class_scores_equal_single_grade_runs(graded_class):
    g = graded_class
    rows = _csv(g["out"] / "grades.csv")
    assert set(rows) == set(g["kinds"])

    def single(key: str) -> dict:
        path = g["base"] / "single" / f"{key}.json"
        subprocess.run(PAGEDLAB + ["grade", "--impl", str(g["base"] / "in" / key), "--json", str(path),
                                   "--tasks", ",".join(fake_class.TASKS), "--no-hidden"],
                       env=g["env"], cwd=ROOT, capture_output=True, check=True, timeout=600)
        return json.loads(path.read_text())

    # Full marks, one task lost, a crash: each takes another way to its score (the stubs score
    # nothing either way; the hang's single run would wait out its limit again, and its CSV row
    # is checked by the next test).
    compared = ["alice_solution", "erin_mutant_b", "ivan_crash"]
    with ThreadPoolExecutor(2) as pool:
        singles = dict(zip(compared, pool.map(single, compared)))
    for key, results in singles.items():
        tasks = {f"task{t['number']}": f"{t['score']:g}" for t in results["tests"]}
        assert {t: rows[key][t] for t in tasks} == tasks, key
        assert rows[key]["total"] == f"{results['score']:g}", key
    full = sum(points.BY_TASK[f"task{t}"].points for t in fake_class.TASKS)
    assert rows["alice_solution"]["total"] == rows["alice_solution"]["max"] == f"{full:g}"


@pytest.mark.integration
@pytest.mark.xdist_group("graded-class")  # one worker grades the class once (conftest.py)
def test_the_hang_and_the_crash_are_student_failures(graded_class):
    out = graded_class["out"]
    rows = _csv(out / "grades.csv")
    log = (out / class_report.PROBLEMS_LOG).read_text()
    for key, words in (("judy_hang", "timed out"), ("ivan_crash", "SIGSEGV")):
        assert rows[key]["status"] == "graded" and rows[key]["task1"] == "0"
        assert key not in log
        results = json.loads((out / "students" / key / "results.json").read_text())
        assert words in results["tests"][0]["output"]
    assert log == ""  # a clean run: no grader problems at all
    # Each planted bug fails its own task with a real verdict, not "not implemented".
    record = {r.key: r for r in class_report.collect(out)}
    for key, task in (("dan_mutant_a", "task1"), ("erin_mutant_b", "task12"), ("nina_copy", "task11")):
        mine = [why for t, _, why in record[key].failures if t == task]
        assert mine and not any("not implemented" in why for why in mine), (key, mine)


@pytest.mark.integration
@pytest.mark.xdist_group("graded-class")  # one worker grades the class once (conftest.py)
def test_the_near_copies_are_the_top_pair_and_honest_work_is_not_flagged(graded_class):
    out = graded_class["out"]
    pairs = json.loads((out / "similarity.json").read_text())
    assert {pairs[0]["a"], pairs[0]["b"]} == {"nina_copy", "oscar_copy"} and pairs[0]["flagged"]
    assert pairs[0]["score"] > pairs[1]["score"]
    honest = {"alice_solution", "bob_stub", "carol_stub_nested"}
    assert not [p for p in pairs if {p["a"], p["b"]} <= honest]
    page = (out / "report.html").read_text()
    assert "never a verdict" in page and "<mark>" in page
    assert page.count("src='data:image/png;base64,") == 2  # histogram and pass rates, inline
    assert "src='http" not in page and "<link" not in page and "<script" not in page  # self-contained
    second = graded_class["second"].stdout
    assert "pass rate per task" in second and "nina_copy ~ oscar_copy" in second


def test_grade_class_and_an_array_index_grade_with_one_grader_version(tmp_path):
    """The same options typed ("--tasks 12,1") and read back from options.json (task ids) are one
    grader version: a folder graded partly each way merges, and neither regrades the other's."""
    assert classroom.grader_version(["12", "1"], False) == classroom.grader_version(["task1", "task12"], False)
    assert classroom.grader_version(None, True) == classroom.grader_version([r.id for r in points.select(None)], True)
    assert classroom.grader_version(["1"], False) != classroom.grader_version(["1"], True)
