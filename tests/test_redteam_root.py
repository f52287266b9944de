"""Red team, root's side: what the grader itself does with a hostile submission's bytes.

The submission has full code execution as the sandbox user; what it can still reach is what root
reads back (the record, the output, the upload) and the folders root looks in. Root must run
nothing it planted, stay linear and capped on what it wrote, show none of its control characters
and never take its words for the grader's. The attacks are real submissions where the attack is
in the submission's code; the parsing defences are also checked on the bytes alone (fast).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from test_redteam import PY_FILES, ROOT, _submission, grade_as_pool, sandbox, sandbox_user  # noqa: F401

from pagedlab.drivers.record import Stream
from pagedlab.grader import class_report, classroom, intake, submission
from pagedlab.grader import records as record
from pagedlab.grader.cli import grade
from pagedlab.grader.judge import judge, refer_to_first_report
from pagedlab.grader.pipeline import GRACE, CheckOutcome
from pagedlab.grader.report import GRADER_PROBLEM
from pagedlab.sandbox.policy import WALL_FACTOR

API_OFF = Path(__file__).parent / "submissions" / "student_api_off.py"
# The bytes an attacker would like an instructor's terminal to obey: erase the line, go to its
# start, print a perfect score; then a right-to-left override.
FORGED_SCREEN = "\x1b[2K\r\x1b[1A✓ task1  8/8 … total 110/110\x9b2J\u202etxt.exe"
RAW_CONTROLS = ("\x1b", "\r", "\x9b", "\u202e")
MAX_STRING = 4000  # pagedlab.untrusted's: longer than any honest label or message


@pytest.fixture(autouse=True)
def student_api_off(monkeypatch):
    """The attacks import os, json and pagedlab's internals: the student API would refuse them at
    intake, before the root-side layer each one is aimed at."""
    monkeypatch.setenv("PAGEDLAB_GRADING_PLUGIN", str(API_OFF))


def _forging(obs_code: str) -> str:
    """Appended to memory_manager.py: write a record of the grader's format straight into the
    record descriptor, one forged record per planned check, then leave before any driver runs."""
    return textwrap.dedent('''
        import json as _j, os as _o
        def _forge():
            fd = _o.environ.get("PAGEDLAB_RECORD_FD")
            if not fd:
                return
            from pagedlab.grader import registry as _fw, golden as _g
            checks = _fw.checks_of("task1", hidden=False)
            with _o.fdopen(int(fd), "a", closefd=False) as out:
                out.write(_j.dumps({"event": "start"}) + "\\n")
                for i, c in enumerate(checks):
                    obs = [dict(o) for o in _g.record(c.key).obs]
OBS_CODE                    rec = {"obs": obs, "status": "completed", "error": None}
                    out.write(_j.dumps({"event": "begin", "index": i}) + "\\n")
                    out.write(_j.dumps({"event": "record", "index": i, "record": rec}) + "\\n")
                out.write(_j.dumps({"event": "done"}) + "\\n")
            _o._exit(0)
        _forge()
    '''.replace("OBS_CODE", textwrap.indent(textwrap.dedent(obs_code).strip("\n") + "\n", " " * 20)))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


# ---------------------------------------------------------------------------------------------
# Linear and capped: labels, records, uploads
# ---------------------------------------------------------------------------------------------
# "the kernel failed to run: a: " over and over on one line: each occurrence was a start for the
# judge's kernel-error regex, whose lazy `.*?` then scanned to the end of the line (quadratic).
QUADRATIC_LABEL = "the kernel failed to run: a: " * (4 * 2**20 // 29)


def test_a_4mb_label_in_a_real_submission_is_clipped_and_the_grade_finishes(tmp_path):
    sub = _submission(tmp_path, _forging(f'''
        obs[0]["w"] = {QUADRATIC_LABEL[:29]!r} * {len(QUADRATIC_LABEL) // 29}
    '''), files=("memory_manager.py",))
    results = grade(str(sub), tasks=["1"], hidden=False, echo=lambda *a: None, json_path=tmp_path / "r.json")
    assert results["score"] == 0
    output = results["tests"][0]["output"]
    assert "more characters" in output  # the label was clipped, and said so
    assert len(output) < 40 * MAX_STRING


def test_a_4mb_label_is_clipped_before_the_judge_sees_it():
    """The same record as bytes: parsed, judged and its kernel errors referred to, all on the
    clipped label (the judge's regex met 4 MB once and ran for hours)."""
    want = Stream([{"k": "eq", "w": "llm_init(pool, 4096)", "v": 1}], "completed")
    forged = {"obs": [{"k": "eq", "w": QUADRATIC_LABEL, "v": 1}], "status": "completed", "error": None}
    lines = [{"event": "start"}, {"event": "begin", "index": 0}, {"event": "record", "index": 0, "record": forged},
             {"event": "done"}]
    data = "".join(json.dumps(e) + "\n" for e in lines).encode()
    got = record.parse(data, len(data))
    label = got.records[0].obs[0]["w"]
    assert len(label) < MAX_STRING + 100 and label.endswith("more characters)")
    verdict = judge(want, got.records[0])
    outcomes = [CheckOutcome("a", False, verdict.message), CheckOutcome("b", False, verdict.message)]
    refer_to_first_report(outcomes)
    assert not verdict.passed and len(outcomes[1].message) < 3 * MAX_STRING


def test_kernel_errors_are_still_referred_to_their_first_report():
    text = "the kernel failed to run: illegal_address: read past the end at paged_attention.cu:42 (block 3)"
    outcomes = [CheckOutcome("first", False, text), CheckOutcome("second", False, "  " + text)]
    refer_to_first_report(outcomes)
    assert outcomes[0].message == text
    assert outcomes[1].message == ("  the kernel failed to run: the same illegal_address at paged_attention.cu:42 "
                                   "as under \u2717 first (the report is shown there)")


@pytest.fixture
def loads_seen(monkeypatch):
    """The length of every text record.parse hands to json.loads."""
    seen = []
    real = record.json.loads

    def counting(text, *a, **k):
        seen.append(len(text))
        return real(text, *a, **k)

    monkeypatch.setattr(record.json, "loads", counting)
    return seen


def test_a_record_of_millions_of_values_is_refused_before_parsing(loads_seen):
    """32 MB of `[[],[],…]` is under the byte cap but 10 million lists in root's memory (a 63 MB
    record cost root 3 GB and 90 s): refused from a count of its bytes, never parsed."""
    flood = b'{"event": "record", "index": 0, "record": {"obs": [' + b"[]," * (10 * 2**20) + b'[]]}}\n'
    data = b'{"event": "start"}\n' + flood
    got = record.parse(data, len(data))
    assert all(n < 2**20 for n in loads_seen), loads_seen
    assert got.malformed and not got.records and "values" in got.malformed


def test_a_record_over_the_byte_cap_is_refused_unread(loads_seen):
    got = record.parse(b"x" * 1024, record.MAX_RECORD_BYTES + 1)
    assert got.malformed and "limit" in got.malformed
    assert loads_seen == []


def test_honest_records_pass_the_caps_unchanged():
    from pagedlab.grader import golden

    for key, rec in golden.load()["records"].items():
        assert record._scan(rec) == (True, False), key  # not too deep, no string to clip
    data = (json.dumps({"event": "record", "index": 0, "record": rec}) + "\n").encode()
    assert record._values(data) < record.MAX_RECORD_VALUES // 50


def _deep(top: Path, depth: int, leaf: str = "memory_manager.py") -> None:
    """`depth` nested folders under `top` (os.makedirs would recurse), a file at the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_an_upload_1200_folders_deep_is_refused_and_the_class_is_graded(tmp_path):
    from pagedlab.sandbox.workspace import remove_tree

    src = tmp_path / "in"
    for who in ("ann", "deep", "zed"):
        (src / who).mkdir(parents=True)
    _deep(src / "deep", 1200)
    for who in ("ann", "zed"):
        shutil.copy(ROOT / "solutions" / "buddy.py", src / who / "buddy.py")
    out = tmp_path / "out"
    try:
        lines = []
        students = classroom.prepare(src, out, echo=lines.append)
        assert [s.key for s in students] == ["ann", "deep", "zed"]
        said = (out / "students" / "deep" / "intake.txt").read_text()
        assert f"nested over {submission.MAX_DEPTH} deep" in said
        states = classroom.grade_all(students, out, jobs=1, tasks=["12"], hidden=False, echo=lambda *a: None)
        # Nothing gradable was found above the cap: the deep upload counts as empty (0 points).
        assert {k: (s["status"], s.get("score")) for k, s in states.items()} == {
            "ann": ("graded", 4.0), "deep": ("empty", 0), "zed": ("graded", 4.0)}
    finally:
        remove_tree(src)


def test_an_upload_with_too_many_entries_is_searched_only_so_far(tmp_path, monkeypatch):
    monkeypatch.setattr(submission, "MAX_ENTRIES", 50)
    sub = tmp_path / "sub"
    sub.mkdir()
    for i in range(60):
        (sub / f"f{i:02}").write_text("")
    located, refused = submission.find(sub)
    assert any("over 50 files and folders" in line for line in refused)


def test_a_class_zip_member_1200_folders_deep_is_refused(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("class/ann/buddy.py", (ROOT / "solutions" / "buddy.py").read_text())
        zf.writestr("class/deep/" + "d/" * 1200 + "buddy.py", "x = 1\n")
    found = intake.discover(archive, tmp_path / "unpacked")
    assert [s.key for s in found.students] == ["ann", "deep"]
    assert any("folders deep" in line for line in found.refused)


# ---------------------------------------------------------------------------------------------
# Output: control characters escaped everywhere, grader problems only from the grader
# ---------------------------------------------------------------------------------------------
FAKE_GRADER_PROBLEM = "autograder problem, not your code (tell your instructor): the judge is down"


def test_escape_sequences_from_a_real_submission_reach_no_output(tmp_path, capsys):
    sub = _submission(tmp_path, _forging(f'''
        obs[0] = dict(obs[0], v="forged", s={FORGED_SCREEN + chr(10) + FAKE_GRADER_PROBLEM!r})
    '''), files=("memory_manager.py",))
    # The upload's file names are the student's too: a refused file is listed by its path.
    (sub / "x\x1b[2J\r").mkdir()
    (sub / "x\x1b[2J\r" / "buddy.py").symlink_to("/etc/passwd")
    from pagedlab.grader import cli as grade_cli

    out = tmp_path / "out" / "students" / "mallory"
    out.mkdir(parents=True)
    results = grade(str(sub), tasks=["1"], hidden=False, echo=grade_cli._say, json_path=out / "results.json")
    printed = capsys.readouterr().out
    written = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert "✓ task1  8/8 … total 110/110" in written["tests"][0]["output"]  # shown, as text
    for where, text in [("stdout", printed), ("results.json", "\n".join(_strings(written))),
                        ("grade()", "\n".join(_strings(results)))]:
        assert not any(c in text for c in RAW_CONTROLS), (where, [c for c in RAW_CONTROLS if c in text])
    assert "\\x1b[2K\\r\\x1b[1A" in printed
    # The class report over it: the same text, no control character, and no grader problem.
    (out / "student.json").write_text(json.dumps({"name": "Mal\x1b[31mlory\u202e", "email": "m@x\r"}))
    from pagedlab.grader import class_queue  # the queue and state grade-class would have written

    class_queue.write(tmp_path / "out", ["mallory"], ["1"], False)
    (out / "state.json").write_text(json.dumps({"status": "graded", "key": "mallory", "grader": "v",
                                                "options": class_queue.options(["1"], False)}))
    assert class_report.build(tmp_path / "out", echo=lambda *a: None) == 0
    for name in ("report.html", "grades.csv", class_report.PROBLEMS_LOG):
        text = (tmp_path / "out" / name).read_text(encoding="utf-8")
        assert not any(c in text for c in RAW_CONTROLS), name
    assert (tmp_path / "out" / class_report.PROBLEMS_LOG).read_text() == ""
    row = next(csv.DictReader((tmp_path / "out" / "grades.csv").open(encoding="utf-8")))
    assert row["name"] == "Mal\\x1b[31mlory\\u202e"


def test_a_grader_problem_the_grader_raised_is_logged(tmp_path):
    """The flag is set where the grader decides it (here: a reference that cannot be trusted)."""
    from pagedlab.grader import report
    from pagedlab.grader.pipeline import TaskOutcome
    from pagedlab.spec import manifest

    outcome = TaskOutcome(manifest.task("task1"), grader_error=True,
                          problem="autograder problem, not your code (tell your instructor): the reference is writable")
    folder = tmp_path / "students" / "ann"
    folder.mkdir(parents=True)
    results = report.results_json([outcome], [], execution_time=1, output="")
    (folder / "results.json").write_text(json.dumps(results))
    from pagedlab.grader import class_queue  # the queue and state grade-class would have written

    class_queue.write(tmp_path, ["ann"], ["1"], True)
    (folder / "state.json").write_text(json.dumps({"status": "graded", "key": "ann", "grader": "v",
                                                   "options": class_queue.options(["1"], True)}))
    assert class_report.build(tmp_path, echo=lambda *a: None) == 0
    assert (tmp_path / class_report.PROBLEMS_LOG).read_text() == \
        "ann: task1: autograder problem: the reference is writable\n"


# ---------------------------------------------------------------------------------------------
# The judge compares types as the contract states
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("want, mine", [
    (1, 1.0), (1, True), (0, False), (True, 1), (1.0, 1), ("1", 1), (None, 0),
    ([1, 2], [1, 2.0]), ({"a": 1}, {"a": True}), ([[0]], [[False]]), ({"a": [1, 2]}, {"a": [1, 2.0]}),
])
def test_the_judge_tells_int_float_and_bool_apart(want, mine):
    expected = Stream([{"k": "eq", "w": "free_count(engine)", "v": want}], "completed")
    got = Stream([{"k": "eq", "w": "free_count(engine)", "v": mine}], "completed")
    assert not judge(expected, got).passed


@pytest.mark.parametrize("value", [1, 1.5, True, None, "x", [1, [2.0, False]], {"a": {"b": [0, 1]}}])
def test_the_judge_passes_the_same_value(value):
    expected = Stream([{"k": "eq", "w": "w", "v": value}], "completed")
    assert judge(expected, Stream([{"k": "eq", "w": "w", "v": json.loads(json.dumps(value))}], "completed")).passed


def test_a_real_submission_returning_floats_for_ints_fails(tmp_path):
    """Every recorded value of Task 1 turned into its float (or bool) twin: == said equal."""
    sub = _submission(tmp_path, _forging('''
        for o in obs:
            if type(o.get("v")) is int:
                o["v"] = float(o["v"]) if o["v"] not in (0, 1) else bool(o["v"])
    '''), files=("memory_manager.py",))
    results = grade(str(sub), tasks=["1"], hidden=False, echo=lambda *a: None)
    assert results["score"] == 0


# ---------------------------------------------------------------------------------------------
# The reference is root's own: a planted course folder above grade-class's output runs nothing
# ---------------------------------------------------------------------------------------------
# Plants a course marker and a solutions/ whose every file records who ran it, in the folder the
# instructor is known to grade in (the real attack used /tmp itself: every --out there is below it).
PLANT_A_COURSE = '''
    import os as _o
    from pathlib import Path as _P
    def _plant(above):
        import pagedlab
        stubs = _P(pagedlab.__file__).resolve().parent.parent / "exercises"
        if not _o.access(above, _o.W_OK) or (above / "solutions").exists():
            return
        (above / ".pagedlab-course").write_text('edition = "instructor"\\n')
        (above / "solutions").mkdir(mode=0o777)
        for stub in stubs.glob("*.py"):
            proof = f"open({str(above / 'ran-as-')!r} + str(__import__('os').getuid()), 'w').close()\\n"
            (above / "solutions" / stub.name).write_text(proof + stub.read_text())
    _plant(_P(WORLD))
'''


# Users of this module's own: the grader kills every process of its pool's users between tasks.
POOL = ["pagedlab-sandbox-rr0", "pagedlab-sandbox-rr1"]


@pytest.fixture
def pool(sandbox, monkeypatch):  # noqa: F811 - the sandbox fixture, imported above
    return grade_as_pool(POOL, monkeypatch)


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox pool (conftest.py)
def test_a_course_planted_above_grade_class_output_is_never_run(pool, tmp_path):
    """--out under a world-writable sticky folder (a shared /srv folder, as /tmp is to others):
    the first student plants a course folder above it; root must not run it, and the classmate
    graded after keeps full marks. The folder is the test's own, not /tmp: a marker in /tmp would
    reach other tests' folders, and a sandboxed task's /tmp, /var/tmp and /dev/shm are private
    (what it writes there never reaches the grader's), so the attack plants outside them."""
    Path("/srv").mkdir(mode=0o755, exist_ok=True)
    world = Path(tempfile.mkdtemp(prefix="pagedlab-sandbox-world-", dir="/srv"))
    world.chmod(0o1777)
    subs = world / "uploads"
    subs.mkdir(mode=0o700)
    (subs / "amy-attacker").mkdir()
    (subs / "zoe").mkdir()
    for name in PY_FILES + ("paged_attention.cu",):
        shutil.copy(ROOT / "solutions" / name, subs / "zoe" / name)
        extra = textwrap.dedent(PLANT_A_COURSE).replace("WORLD", repr(str(world))) if name == "memory_manager.py" else ""
        (subs / "amy-attacker" / name).write_text((ROOT / "exercises" / name).read_text() + extra)
    out = world / "out"
    try:
        run = subprocess.run([sys.executable, "-m", "pagedlab", "grade-class", str(subs), "--out", str(out),
                              "--jobs", "1", "--tasks", "1,2"], capture_output=True, text=True, timeout=1500,
                             cwd=out.parent, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert (world / ".pagedlab-course").is_file(), ("the attack did not plant", run.stdout[-2000:])
        ran = sorted(p.name for p in world.glob("ran-as-*"))
        assert ran == [], f"the planted reference ran: {ran}"
        scores = {who: json.loads((out / "students" / who / "results.json").read_text())["score"]
                  for who in ("amy-attacker", "zoe")}
        assert scores == {"amy-attacker": 0, "zoe": 22}, (scores, run.stdout[-2000:])
    finally:
        subprocess.run(["rm", "-rf", str(world)], check=False)


def test_the_reference_is_not_found_from_the_working_directory(tmp_path, monkeypatch):
    from pagedlab import course

    planted = tmp_path / "planted"
    (planted / "solutions").mkdir(parents=True)
    (planted / course.MARKER).write_text('edition = "instructor"\n')
    (planted / "work").mkdir()
    monkeypatch.chdir(planted / "work")
    monkeypatch.delenv(course.ENV_VAR, raising=False)
    assert course.find() == planted  # a student's own process still finds its course here
    assert course.reference_dir() == ROOT / "solutions"  # the grader takes its installation's


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rule applies to a grader running as root")
def test_root_runs_a_course_folders_notebooks_only_when_root_alone_can_change_them(tmp_path, monkeypatch):
    from pagedlab import course
    from pagedlab.grader.notebooks import notebook_dir

    home = tmp_path / "student"
    (home / "notebooks").mkdir(parents=True)
    (home / course.MARKER).write_text('edition = "student"\n')
    monkeypatch.chdir(home)
    monkeypatch.delenv(course.ENV_VAR, raising=False)
    assert notebook_dir() == home.resolve() / "notebooks"  # the course it was run from
    home.chmod(0o777)  # anyone may now swap notebooks/ for their own
    said = []
    assert notebook_dir(said.append) == ROOT.resolve() / "notebooks"  # the installation's instead
    assert "can be changed by a user other than root" in said[0] or "which users other than root can write" in said[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rule applies to a grader running as root")
def test_root_refuses_a_reference_others_can_change(tmp_path, monkeypatch):
    from pagedlab import course

    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "memory_manager.py").write_text("")
    assert course.reference_dir(str(ref)) == ref.resolve()
    (ref / "memory_manager.py").chmod(0o666)
    with pytest.raises(course.UntrustedFolder, match="memory_manager.py"):
        course.reference_dir(str(ref))
    (ref / "memory_manager.py").chmod(0o644)
    open_above = tmp_path / "open"
    open_above.mkdir()
    open_above.chmod(0o777)  # world-writable, not sticky: anyone can swap what is inside
    ref2 = open_above / "ref"
    ref2.mkdir()
    with pytest.raises(course.UntrustedFolder, match="not sticky"):
        course.reference_dir(str(ref2))
    open_above.chmod(0o1777)  # sticky, and ref2 is root's: it cannot be swapped
    assert course.reference_dir(str(ref2)) == ref2.resolve()
    os.chown(ref2, 65534, -1)
    with pytest.raises(course.UntrustedFolder):
        course.reference_dir(str(ref2))
    monkeypatch.setenv("PAGEDLAB_REFERENCE", str(ref2))
    from pagedlab.grader.pipeline import run_task
    from pagedlab.spec import manifest

    outcome = run_task(manifest.task("task1"), str(ROOT / "solutions"), ROOT / "solutions", hidden=True,
                       hidden_seed=1)
    assert outcome.grader_error and "not run" in outcome.problem and outcome.score == 0


# ---------------------------------------------------------------------------------------------
# The verdict path: "the machine was too busy" is judged from outside the submission
# ---------------------------------------------------------------------------------------------
# Sixty processes pinned to one CPU, each waiting for a signal, woken together every quarter second
# for a fifth of a millisecond each: they use a few percent of a CPU, but each waits behind the
# others, so their summed run delay (what /proc/<pid>/schedstat says they waited for a CPU) is
# seconds per second. The check itself never returns.
SELF_STARVED = '''
def llm_init(pool_addr, pool_size):
    import os, signal, time
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    pids = []
    for _ in range(60):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            while True:
                signal.sigwait({signal.SIGUSR1})
                end = time.perf_counter() + 0.0002
                while time.perf_counter() < end:
                    pass
        pids.append(pid)
    while True:
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)
        time.sleep(0.25)
'''


# On a machine with no cgroups (a default Docker container) the probe shares the CPUs with every
# process of the task: a hundred spinners in sessions of their own leave root's probe a few
# percent of a CPU, and the check itself, busy a few percent of the time, would pass for a task
# the busy machine starved, if root did not count the spinners as the task's, which ends it at its
# CPU limit. They make themselves non-dumpable too: where the kernel then shows their /proc
# folders as root's, root counts them by the real uid in their status (cputime.tree_cpu).
HIDDEN_SPINNERS = '''
def llm_init(pool_addr, pool_size):
    import ctypes, os, time
    for _ in range(100):
        try:
            if os.fork() == 0:
                os.setsid()
                ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
                while True:
                    pass
        except OSError:
            break
    while True:
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        time.sleep(0.1)
'''


@pytest.mark.integration
@pytest.mark.xdist_group("users")  # the sandbox user (conftest.py)
@pytest.mark.parametrize("attack, cgroups", [(SELF_STARVED, True), (HIDDEN_SPINNERS, False)],
                         ids=["pinned-and-woken-together", "hidden-spinners-without-cgroups"])
def test_a_task_that_starves_itself_is_its_own_timeout_not_the_graders(sandbox, tmp_path, monkeypatch, attack,  # noqa: F811
                                                                      cgroups):
    """It waited for a CPU only behind its own processes: the machine had CPU to give (a probe of
    root's own got it), so the clock ends it at its limit as any sleeper, it scores 0 as its own
    timeout, and no "autograder problem" is raised. Before: run twice to four times its limit on
    the clock (65 s here), then flagged as the grader's problem ("the machine was too busy")."""
    from pagedlab.sandbox import process

    if not cgroups:
        monkeypatch.setattr(process.cgroups, "create", lambda *a, **k: None)
    monkeypatch.setenv("PAGEDLAB_GRADE_TIME_SCALE", "0.1")  # Task 1's 30 s limit becomes 3 s
    sub = _submission(tmp_path, textwrap.dedent(attack), files=("memory_manager.py",))
    began = time.monotonic()
    results = grade(str(sub), tasks=["1"], hidden=False, echo=lambda *a: None)
    took = time.monotonic() - began
    test = results["tests"][0]
    assert GRADER_PROBLEM not in test.get("extra_data", {}), test.get("extra_data")  # the student's timeout
    assert test["score"] == 0
    assert "timed out" in test["output"], test["output"][-1500:]
    # one run, ended at its limit: well before the four times longer wall-clock limit of a
    # starved task, let alone two of them
    assert took < (3 + GRACE) * WALL_FACTOR, took
