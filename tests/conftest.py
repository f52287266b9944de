"""Fixtures shared by test modules under tests/ (the xdist groups live in ../conftest.py)."""

from __future__ import annotations

import pytest

# A test process holds the judge side, as a notebook's kernel does: importing `pagedlab.reference`
# plugs its empty engines into `checks.scenes` for the drivers a test runs in-process (through the
# judge link when a test makes one active, as in a grader's notebook run).
import pagedlab.reference  # noqa: F401


@pytest.fixture(scope="session")
def course_lab(tmp_path_factory):
    """The course's JupyterLab from `./course open`, one per worker (tests/course_lab.py).
    A test using it must be in the `course-venv` xdist group, so one worker starts it once."""
    from course_lab import CourseLab

    lab = CourseLab(tmp_path_factory.mktemp("course-lab"))
    yield lab
    lab.close()
