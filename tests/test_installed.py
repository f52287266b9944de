"""The install shape of Colab, Binder and a JupyterHub image: pagedlab from its wheel (not
editable), the course folder somewhere else, a student who is not root.

Before the course folder was found from the working directory, every graded cell here failed
with "memory_manager.py not found in .../site-packages/exercises".

The graded cells of notebooks 02 and 08 under this same installed wheel, as real users with the
course in their homes (stubs and finished files, the compile cache in the student's own home),
run in tests/test_jupyterhub.py; every notebook runs whole under nbval in the same CI.
"""

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from installed_env import (
    RUNUSER,
    chown_tree,
    create_user,
    installed_env,
    make_student_course,
    need_root,
    remove_user,
    user_env,
)

# Builds the installed venv (shared with test_jupyterhub) and creates its own user: conftest.py.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("installed-venv")]
STUDENT = "pagedlab-colab"


@pytest.fixture(scope="module")
def student():
    need_root()
    bin_dir = installed_env()
    # Not pytest's temp folder: any pytest starting meanwhile resets it to 700, locking the student out.
    base = Path(tempfile.mkdtemp(prefix="pagedlab-colab-"))
    base.chmod(0o711)
    entry = create_user(STUDENT, base / "home")
    course = make_student_course(base / "home" / "pagedlab-student", solved=False)
    chown_tree(course, entry)
    try:
        yield bin_dir, entry, course
    finally:
        remove_user(STUDENT)
        shutil.rmtree(base, ignore_errors=True)


def as_student(student, *cmd, cwd, timeout=600):
    bin_dir, entry, _ = student
    return subprocess.run([RUNUSER, "-u", entry.pw_name, "--", *cmd], cwd=cwd, capture_output=True, text=True,
                          env=user_env(bin_dir, entry.pw_dir), timeout=timeout)


def test_the_wheel_is_not_the_course(student):
    bin_dir, _, course = student
    site = subprocess.run([str(bin_dir / "python"), "-c", "import pagedlab, os; print(os.path.dirname(pagedlab.__file__))"],
                          capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    assert "site-packages" in site and str(course) not in site


def test_doctor_names_the_course_folder(student):
    _, _, course = student
    proc = as_student(student, "pagedlab", "doctor", cwd=course / "notebooks")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("course folder"))
    assert str(course) in line and "student edition" in line, proc.stdout


def test_outside_the_course_the_wheel_is_not_taken_for_one(student):
    # From home, above the course: no folder of the wheel's may stand in for the course. The
    # doctor's row for this is the same lookup (course.find), and its MISSING wording is
    # test_course's; a second doctor here cost 9 CPU-s (torch, JupyterLab) to show no more.
    bin_dir, entry, _ = student
    proc = as_student(student, str(bin_dir / "python"), "-c", "import pagedlab; pagedlab.load('memory_manager')",
                      cwd=entry.pw_dir)
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("pagedlab.course.NoCourseFolder: no course folder found from"), proc.stderr
    assert "set PAGEDLAB_COURSE" in error and "site-packages" not in error, proc.stderr


def test_load_and_grade_find_the_students_files(student):
    bin_dir, _, course = student
    proc = as_student(student, str(bin_dir / "python"), "-c",
                      "import pagedlab; print(pagedlab.load('memory_manager').__file__)", cwd=course / "notebooks")
    assert proc.stdout.strip() == str(course / "exercises" / "memory_manager.py"), proc.stderr
    proc = as_student(student, "pagedlab", "grade", "--impl", "exercises", "--tasks", "1,2", cwd=course)
    assert proc.returncode == 0, proc.stderr
    assert "missing from the submission" not in proc.stdout
    assert "✗ task1" in proc.stdout and "not implemented yet: Task 1" in proc.stdout
    proc = as_student(student, "pagedlab", "assign", "--check", cwd=course)
    assert proc.returncode == 2 and "it needs solutions/" in proc.stderr
