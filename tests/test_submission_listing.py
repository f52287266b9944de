"""What the Gradescope output lists of a student's upload: the C track's file only where it applies."""

from __future__ import annotations

import pytest

from pagedlab.grading import submission
from pagedlab.grading.points import SUBMISSION_FILES
from pagedlab.loader import ROOT


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
def test_a_c_track_student_sees_the_c_file_standing_in_for_the_python_one(tmp_path):
    names = [n for n in SUBMISSION_FILES if n != "memory_manager.py"] + ["llm_memory.c"]
    _, report = submission.prepare(_upload(tmp_path, names), tmp_path / "work")
    assert "MISSING" not in report
    assert "llm_memory.c" in report and "stands in for memory_manager.py" in report


@pytest.mark.task_wide
def test_a_student_missing_both_is_told_either_file_will_do(tmp_path):
    names = [n for n in SUBMISSION_FILES if n != "memory_manager.py"]
    _, report = submission.prepare(_upload(tmp_path, names), tmp_path / "work")
    missing = [line for line in report.splitlines() if "MISSING" in line]
    assert missing == ["  memory_manager.py      MISSING (or llm_memory.c for the C track)"]


@pytest.mark.task_wide
def test_a_student_uploading_both_is_told_the_python_file_is_graded(tmp_path):
    _, report = submission.prepare(_upload(tmp_path, [*SUBMISSION_FILES, "llm_memory.c"]), tmp_path / "work")
    assert "stands in for" not in report and "MISSING" not in report
    assert "  llm_memory.c           llm_memory.c  (not graded: memory_manager.py is uploaded too, and graded)" in report
