"""Fixtures shared by test modules under tests/ (the xdist groups live in ../conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def course_lab(tmp_path_factory):
    """The course's JupyterLab from `./course open`, one per worker (tests/course_lab.py).
    A test using it must be in the `course-venv` xdist group, so one worker starts it once."""
    from course_lab import CourseLab

    lab = CourseLab(tmp_path_factory.mktemp("course-lab"))
    yield lab
    lab.close()
