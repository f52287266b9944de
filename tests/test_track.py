"""Which file Part A is graded from (pagedlab/track.py): a finished file is never passed over for an
untouched stub, every grade says which file on its first lines, and a student who edited both
chooses with --track, track.txt or the grader's PAGEDLAB_TRACK.

Measured before: a student who finished llm_memory.c and left memory_manager.py as
shipped got 19/110 from `pagedlab grade --impl exercises`: Part A came from the Python stub ("not
implemented yet: Task 1: llm_init") and llm_memory.c was never mentioned; Gradescope gave the
same 0. The planted cases below are that student, the student who edited both, whitespace-only
edits to a stub, and a marker that says nothing usable.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pagedlab import cli, doctor, graded, track
from pagedlab.grader import class_report, classroom, package
from pagedlab.grader import cli as grade_cli
from pagedlab.spec import manifest
from pagedlab.spec.catalog import CheckFailure

ROOT = Path(__file__).resolve().parent.parent
PY, C = track.PYTHON_FILE, track.C_FILE
PART_A = [r.id for r in manifest.TABLE if PY in r.files]
PART_A_POINTS = sum(r.points for r in manifest.TABLE if PY in r.files)


def _folder(tmp_path: Path, py: str | None, c: str | None, name: str = "sub") -> Path:
    """A submission: each Part A file from `exercises` (the stub), `solutions` (finished) or None."""
    folder = tmp_path / name
    folder.mkdir()
    for filename, source in ((PY, py), (C, c)):
        if source:
            (folder / filename).write_bytes((ROOT / source / filename).read_bytes())
    return folder


def _decide(folder, choice=None) -> track.Track:
    return track.decide(folder, choice)


@pytest.fixture(autouse=True)
def _no_grader_setting(monkeypatch):
    monkeypatch.delenv(track.ENV_VAR, raising=False)


# -- the rule -------------------------------------------------------------------------------------
def test_a_finished_c_file_beats_the_untouched_python_stub(tmp_path):
    chosen = _decide(_folder(tmp_path, "exercises", "solutions"))
    assert (chosen.name, chosen.chosen_by) == ("c", "")
    assert chosen.line() == (f"Part A (Tasks 1–5) is graded from {C}: {PY} is the untouched stub the "
                             f"course shipped, and {C} is edited.")


def test_a_finished_python_file_beats_the_untouched_c_stub(tmp_path):
    chosen = _decide(_folder(tmp_path, "solutions", "exercises"))
    assert chosen.name == "python" and chosen.why == f"{C} is the untouched stub the course shipped"


def test_two_stubs_or_two_edited_files_grade_python_and_say_how_to_choose_c(tmp_path):
    stubs = _decide(_folder(tmp_path, "exercises", "exercises", "stubs"))
    assert stubs.name == "python" and "neither file is edited yet" in stubs.why
    both = _decide(_folder(tmp_path, "solutions", "solutions", "both"))
    assert both.name == "python"
    assert f"write c in exercises/{track.MARKER}" in both.line() and "--track c" in both.line()


def test_one_file_alone_is_its_track(tmp_path):
    assert _decide(_folder(tmp_path, None, "exercises", "c")).name == "c"  # even a stub: nothing else
    assert _decide(_folder(tmp_path, "exercises", None, "py")).name == "python"
    none = _decide(_folder(tmp_path, None, None, "none"))
    assert none.name == "python" and not none.present and "neither Part A file" in none.why


def test_a_student_who_edited_both_chooses_c(tmp_path, monkeypatch):
    folder = _folder(tmp_path, "solutions", "solutions")
    assert _decide(folder, "c").name == "c" and _decide(folder, "c").why == "--track c"
    (folder / track.MARKER).write_text("# I wrote Part A in C\nC\n")
    assert _decide(folder).name == "c" and _decide(folder).why == f"{track.MARKER} says c"
    assert _decide(folder, "python").name == "python"  # the command line over the file
    monkeypatch.setenv(track.ENV_VAR, "python")  # the grader's setting over the student's file
    assert _decide(folder).why == f"the grader's setting {track.ENV_VAR}=python"


def test_a_marker_that_names_no_track_is_said_and_the_files_decide(tmp_path, monkeypatch):
    folder = _folder(tmp_path, "exercises", "solutions")
    (folder / track.MARKER).write_text("java\n")
    chosen = _decide(folder)
    assert chosen.name == "c" and f"{track.MARKER} says 'java': the track is c or python" in chosen.line()
    monkeypatch.setenv(track.ENV_VAR, "rust")  # the grader's own setting: a misconfiguration, refused
    with pytest.raises(track.TrackError, match=track.ENV_VAR):
        _decide(folder)


@pytest.mark.parametrize("name", [PY, C])
def test_whitespace_and_comment_edits_leave_a_stub_a_stub(tmp_path, name):
    """A stub saved by a Windows editor (CRLF), with trailing spaces, blank lines and a note in a
    comment is still the stub; a byte comparison would call it edited, and with a finished file
    beside it the grade would take the stub (0 points)."""
    stub = (ROOT / "exercises" / name).read_text()
    comment = "# my notes\n" if name == PY else "/* my notes */\n// more\n"
    edited = "\ufeff" + comment + "\r\n".join(line + "   " for line in stub.splitlines()) + "\r\n\r\n\r\n"
    path = tmp_path / name
    path.write_text(edited, newline="")
    assert path.read_bytes() != (ROOT / "exercises" / name).read_bytes()
    assert track.is_shipped_stub(path)
    other = C if name == PY else PY
    (tmp_path / other).write_bytes((ROOT / "solutions" / other).read_bytes())
    assert track.decide(tmp_path).file == other  # the finished file is graded


@pytest.mark.parametrize("name, change", [(PY, ("return None\n", "return 0\n")),
                                          (C, ("return NULL;", "return 0;"))])
def test_one_changed_token_is_an_edit(tmp_path, name, change):
    stub = (ROOT / "exercises" / name).read_text()
    old, new = change
    assert old in stub
    (tmp_path / name).write_text(stub.replace(old, new, 1))
    assert not track.is_shipped_stub(tmp_path / name)


def test_the_stub_of_an_older_release_still_counts(tmp_path, monkeypatch):
    """assign keeps every fingerprint it recorded: a student cloned before the instructor
    regenerated still holds an untouched stub."""
    monkeypatch.setattr(track, "STUBS", tmp_path / "stubs.json")
    track.STUBS.write_bytes((ROOT / "pagedlab" / "stubs.json").read_bytes())
    track._shipped.cache_clear()
    track._is_stub.cache_clear()
    try:
        old_stub = (ROOT / "exercises" / PY).read_text()
        newer = old_stub.replace("def llm_init(", "def helper_added_later():\n    return 1\n\n\ndef llm_init(", 1)
        assert track.stale({PY: newer}) == [PY]
        track.record({PY: newer})
        assert track.stale({PY: newer}) == [] and track.stale({PY: old_stub}) == []
        kept = json.loads(track.STUBS.read_text())["files"][PY]
        assert len(kept) == len(json.loads((ROOT / "pagedlab" / "stubs.json").read_text())["files"][PY]) + 1
    finally:
        track._shipped.cache_clear()
        track._is_stub.cache_clear()


def test_the_committed_fingerprints_know_todays_stubs():
    from pagedlab import assign

    assert not track.stale(cli._track_stubs(assign)), "run `pagedlab assign`"


# -- what each grade says, and what it grades ----------------------------------------------------
def _grade(folder, **kw) -> tuple[dict, list[str]]:
    said: list[str] = []
    results = grade_cli.grade(str(folder), tasks=PART_A, hidden=False, echo=lambda text="": said.append(text), **kw)
    return results, "\n".join(said).splitlines()


def test_the_c_track_student_of_issue_40_gets_part_a_full_marks(tmp_path):
    folder = _folder(tmp_path, "exercises", "solutions")
    results, said = _grade(folder)
    line = _decide(folder).line()
    assert said[0].startswith("Grading ") and said[1] == line  # the first lines say which file, and why
    assert results["score"] == PART_A_POINTS, said
    assert results["output"].splitlines()[:2] == [f"pagedlab autograder: {PART_A_POINTS:g}/{PART_A_POINTS:g} points.", line]
    for test in results["tests"]:
        assert test["output"].splitlines()[0] == line and test["extra_data"]["part_a"] == C
    listing = "\n".join(said)
    assert f"  {C:<22} {C}  (graded: Part A)" in listing
    assert f"  {PY:<22} {PY}  (not graded: Part A is graded from {C})" in listing


def test_track_c_grades_the_c_file_of_a_student_who_edited_both(tmp_path):
    folder = _folder(tmp_path, "solutions", "exercises")  # the C file is the stub: 0, but from C
    results, said = _grade(folder, track_choice="c")
    assert said[1] == f"Part A (Tasks 1–5) is graded from {C}: --track c."
    assert results["score"] == 0
    first = results["tests"][0]["output"].splitlines()
    assert first[0] == said[1] and any("not implemented yet: Task 1: llm_init" in x for x in first)


def test_track_c_without_a_c_file_says_so_in_every_part_a_task(tmp_path):
    folder = _folder(tmp_path, "solutions", None)
    results, said = _grade(folder, track_choice="c")
    assert "--track c, but llm_memory.c was not submitted" in said[1]
    assert all("llm_memory.c is missing from the submission" in t["output"] for t in results["tests"])


def test_gradescope_takes_the_students_track_txt_from_an_uploaded_folder(tmp_path, monkeypatch):
    root = tmp_path / "autograder"
    upload = root / "submission" / "exercises"
    upload.mkdir(parents=True)
    for name in (PY, C):
        (upload / name).write_bytes((ROOT / "solutions" / name).read_bytes())
    (upload / track.MARKER).write_text("c\n")
    monkeypatch.setenv(grade_cli.AUTOGRADER_ROOT_ENV, str(root))
    assert cli.main(["grade", "--gradescope", "--tasks", "1", "--no-hidden"]) == 0
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["output"].splitlines()[1] == f"Part A (Tasks 1–5) is graded from {C}: {track.MARKER} says c."
    assert results["score"] == manifest.task("task1").points


def test_the_graders_setting_grades_a_class_taught_in_c(tmp_path, monkeypatch):
    folder = _folder(tmp_path, "solutions", "solutions")
    monkeypatch.setenv(track.ENV_VAR, "c")
    _, said = _grade(folder)
    assert said[1] == f"Part A (Tasks 1–5) is graded from {C}: the grader's setting {track.ENV_VAR}=c."


def test_the_autograder_zip_carries_the_classs_track():
    text = (ROOT / "grading" / "run_autograder").read_text()
    assert package.with_track(text, None) == text
    assert 'export PAGEDLAB_TRACK="${PAGEDLAB_TRACK:-c}"' in package.with_track(text, "c")
    with pytest.raises(ValueError):
        package.with_track(text, "java")


def test_grade_class_passes_the_track_on_and_regrades_when_it_changes(tmp_path):
    cmd = classroom.grade_command(tmp_path, tmp_path / "r.json", None, False, "c")
    assert cmd[cmd.index("--track") + 1] == "c"
    assert classroom.grader_version(["1"], False, "c") != classroom.grader_version(["1"], False, None)


def test_the_class_report_counts_a_c_track_students_bugs_as_attempted():
    """memory_manager.py untouched, llm_memory.c graded: a failed Task 4 check is a real failure,
    not "not attempted" (which read the untouched Python stub as the task's file)."""
    rec = class_report.Record("k", status="graded", untouched={PY}, part_a=C,
                              failures=[("task4", "copy-on-write", "the writer's mapping differs")])
    assert rec.not_attempted() == set()
    rec.part_a = ""  # what the report did before: the Python stub stood for the task
    assert rec.not_attempted() == {"task4"}


# -- notebooks and the doctor ---------------------------------------------------------------------
def test_a_demo_on_the_c_track_points_at_notebook_02c(tmp_path):
    folder = _folder(tmp_path, "exercises", "exercises")
    with pytest.raises(CheckFailure, match=r"needs Task 1 .* run its graded cell in notebook 02c"):
        graded.require("task1", impl=folder, track="c")
    with pytest.raises(CheckFailure, match=r"needs Task 1 .* run its graded cell in notebook 02 to"):
        graded.require("task1", impl=folder)


def test_doctor_says_the_track_and_the_rule(tmp_path, capsys, monkeypatch):
    row = doctor._track_row(_folder(tmp_path, "exercises", "solutions"))
    assert row.status == doctor.OK and row.found.startswith(f"{C}: {PY} is the untouched stub")
    monkeypatch.setattr(doctor, "rows", lambda: [row])
    doctor.main()
    assert re.search(r"Edited both\? Python is graded unless exercises/track.txt says c", capsys.readouterr().out)
