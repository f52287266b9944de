"""What the Gradescope output lists of a student's upload: the C track's file only where it applies."""

from __future__ import annotations

import pytest

from pagedlab.grader import submission
from pagedlab.loader import ROOT
from pagedlab.spec.points import SUBMISSION_FILES


def _upload(tmp_path, names):
    up = tmp_path / "upload"
    up.mkdir()
    for name in names:
        (up / name).write_bytes((ROOT / "solutions" / name).read_bytes())
    return up


@pytest.mark.task_wide
def test_a_python_track_student_never_sees_the_c_file_as_missing(tmp_path):
    _, report = submission.prepare(_upload(tmp_path, SUBMISSION_FILES), tmp_path / "work")
    assert "MISSING" not in report
    assert "llm_memory.c" not in report


@pytest.mark.task_wide
def test_a_c_track_student_sees_the_c_file_graded_for_part_a(tmp_path):
    names = [n for n in SUBMISSION_FILES if n != "memory_manager.py"] + ["llm_memory.c"]
    _, report = submission.prepare(_upload(tmp_path, names), tmp_path / "work")
    assert "MISSING" not in report
    assert "  llm_memory.c           llm_memory.c  (graded: Part A)" in report
    assert "  memory_manager.py      not uploaded (llm_memory.c is graded instead)" in report


@pytest.mark.task_wide
def test_a_student_missing_both_is_told_either_file_will_do(tmp_path):
    names = [n for n in SUBMISSION_FILES if n != "memory_manager.py"]
    _, report = submission.prepare(_upload(tmp_path, names), tmp_path / "work")
    missing = [line for line in report.splitlines() if "MISSING" in line]
    assert missing == ["  memory_manager.py      MISSING (or llm_memory.c for the C track)"]


@pytest.mark.task_wide
def test_a_student_uploading_both_edited_is_told_the_python_file_is_graded(tmp_path):
    _, report = submission.prepare(_upload(tmp_path, [*SUBMISSION_FILES, "llm_memory.c"]), tmp_path / "work")
    assert "MISSING" not in report
    assert "  memory_manager.py      memory_manager.py  (graded: Part A)" in report
    assert "  llm_memory.c           llm_memory.c  (not graded: Part A is graded from memory_manager.py)" in report


@pytest.mark.task_wide
def test_an_upload_of_the_whole_folder_on_the_c_track_grades_the_c_file(tmp_path):
    """The folder as a C-track student has it: memory_manager.py as shipped, llm_memory.c
    finished, nested in exercises/ as a zip of the folder unpacks."""
    up = tmp_path / "upload" / "exercises"
    up.mkdir(parents=True)
    for name in [*SUBMISSION_FILES, "llm_memory.c"]:
        source = ROOT / ("solutions" if name == "llm_memory.c" else "exercises") / name
        (up / name).write_bytes(source.read_bytes())
    _, report = submission.prepare(tmp_path / "upload", tmp_path / "work")
    assert "  llm_memory.c           exercises/llm_memory.c  (graded: Part A)" in report
    assert ("  memory_manager.py      exercises/memory_manager.py  (not graded: Part A is graded from "
            "llm_memory.c)") in report
    (up / "track.txt").write_text("python\n")  # a choice is listed, and obeyed
    _, report = submission.prepare(tmp_path / "upload", tmp_path / "work2")
    assert "  track.txt              exercises/track.txt  (a choice of track for Part A)" in report
    assert "  memory_manager.py      exercises/memory_manager.py  (graded: Part A)" in report
