"""The course folder is found from where the student works, not from where pagedlab is installed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pagedlab import course, loader
from pagedlab.deploy import nbgitpuller_link

REPO = Path(__file__).resolve().parent.parent


def make_course(folder: Path, edition: str | None = "student", body: str = "VALUE = 'mine'\n") -> Path:
    (folder / "exercises").mkdir(parents=True)
    (folder / "notebooks").mkdir()
    (folder / "exercises" / "memory_manager.py").write_text(body)
    if edition is not None:
        (folder / course.MARKER).write_text(f'edition = "{edition}"\n')
    return folder


@pytest.fixture
def no_course_env(monkeypatch):
    monkeypatch.delenv(course.ENV_VAR, raising=False)
    monkeypatch.delenv(loader.ENV_VAR, raising=False)


def test_walks_up_from_a_subfolder_to_the_marker(tmp_path, monkeypatch, no_course_env):
    home = make_course(tmp_path / "pagedlab-student")
    monkeypatch.chdir(home / "notebooks")
    assert course.root() == home.resolve()
    assert loader.load("memory_manager").VALUE == "mine"
    assert course.edition(home) == "student"


def test_a_folder_with_exercises_and_notebooks_counts_without_a_marker(tmp_path, monkeypatch, no_course_env):
    home = make_course(tmp_path / "copied", edition=None)
    monkeypatch.chdir(home / "exercises")
    assert course.root() == home.resolve()
    assert loader.impl_dir("exercises") == home.resolve() / "exercises"


def test_the_nearest_marker_wins_over_an_outer_one(tmp_path, monkeypatch, no_course_env):
    outer = make_course(tmp_path / "outer", body="VALUE = 'outer'\n")
    inner = make_course(outer / "class" / "me", body="VALUE = 'inner'\n")
    monkeypatch.chdir(inner / "notebooks")
    assert loader.load("memory_manager").VALUE == "inner"


def test_environment_variable_overrides_the_working_directory(tmp_path, monkeypatch, no_course_env):
    here = make_course(tmp_path / "here", body="VALUE = 'here'\n")
    there = make_course(tmp_path / "there", body="VALUE = 'there'\n")
    monkeypatch.chdir(here)
    monkeypatch.setenv(course.ENV_VAR, str(there))
    assert loader.load("memory_manager").VALUE == "there"
    monkeypatch.setenv(course.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(course.NoCourseFolder, match="PAGEDLAB_COURSE=.*nowhere is not a folder"):
        loader.load("memory_manager")


def test_outside_any_course_the_editable_checkout_is_used(tmp_path, monkeypatch, no_course_env):
    # This test suite runs from an editable checkout, which carries the instructor marker.
    monkeypatch.chdir(tmp_path)
    assert course.root() == REPO
    assert course.edition(REPO) == "instructor"


def test_no_course_anywhere_is_an_error_naming_the_fix(tmp_path, monkeypatch, no_course_env):
    monkeypatch.setattr(course, "_PACKAGE_PARENT", tmp_path / "site-packages")  # a non-editable install
    monkeypatch.chdir(tmp_path)
    assert course.find() is None
    with pytest.raises(course.NoCourseFolder, match="no course folder found from .*PAGEDLAB_COURSE"):
        loader.load("memory_manager")


def test_a_bad_marker_says_what_is_allowed(tmp_path):
    (tmp_path / course.MARKER).write_text('edition = "teacher"\n')
    with pytest.raises(ValueError, match="allowed: instructor, student"):
        course.edition(tmp_path)


def _cli(*args, cwd, **env):
    full = {k: v for k, v in os.environ.items() if k not in (course.ENV_VAR, loader.ENV_VAR)}
    return subprocess.run([sys.executable, "-m", "pagedlab", *args], cwd=cwd, capture_output=True, text=True,
                          env={**full, **env}, timeout=300)


def test_assign_check_without_solutions_is_an_error(tmp_path):
    home = make_course(tmp_path / "student")
    proc = _cli("assign", "--check", cwd=home)
    assert proc.returncode == 2
    assert "it needs solutions/" in proc.stderr and "up to date" not in proc.stdout


def _doctor_in(cwd, monkeypatch, capsys, **env) -> tuple[int, str]:
    """`pagedlab doctor` run from `cwd`, in this process (as _cli's environment: no course or
    implementation variable unless given); its imports are paid once per worker, and the
    command line itself is run by tests/test_doctor.py."""
    from pagedlab import doctor

    monkeypatch.delenv(course.ENV_VAR, raising=False)
    monkeypatch.delenv(loader.ENV_VAR, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    code = doctor.main()
    return code, capsys.readouterr().out


def test_doctor_names_the_course_folder_and_the_implementation(tmp_path, monkeypatch, capsys):
    home = make_course(tmp_path / "student")
    _, out = _doctor_in(home / "notebooks", monkeypatch, capsys)
    line = next(x for x in out.splitlines() if x.startswith("course folder"))
    assert str(home.resolve()) in line and "student edition" in line
    impl = next(x for x in out.splitlines() if x.startswith("implementation"))
    assert str(home.resolve() / "exercises") in impl


def test_doctor_says_plainly_when_there_is_no_course_folder(tmp_path, monkeypatch, capsys):
    code, out = _doctor_in(tmp_path, monkeypatch, capsys, PAGEDLAB_COURSE=str(tmp_path / "gone"))
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("course folder"))
    assert "MISSING" in line and "PAGEDLAB_COURSE" in line


def test_grade_reads_exercises_from_the_course_folder(tmp_path):
    # A copy of the real stubs in a folder outside the checkout: grade must find them there
    # (not say they are missing) and fail task 1 with the stub's "not implemented".
    home = tmp_path / "student"
    (home / "notebooks").mkdir(parents=True)
    (home / "exercises").mkdir()
    (home / course.MARKER).write_text('edition = "student"\n')
    for src in (REPO / "exercises").iterdir():
        if src.is_file():
            (home / "exercises" / src.name).write_bytes(src.read_bytes())
    proc = _cli("grade", "--impl", "exercises", "--tasks", "1", "--no-hidden", cwd=home / "notebooks")
    assert proc.returncode == 0, proc.stderr
    assert "missing from the submission" not in proc.stdout
    assert "✗ task1" in proc.stdout and "not implemented yet: Task 1" in proc.stdout
    # The student's own (finished) file in that folder is what gets graded.
    (home / "exercises" / "memory_manager.py").write_bytes((REPO / "solutions" / "memory_manager.py").read_bytes())
    proc = _cli("grade", "--impl", "exercises", "--tasks", "1", "--no-hidden", cwd=home)
    assert "✓ task1" in proc.stdout, proc.stdout
    proc = _cli("grade", "--notebooks", "--tasks", "1", "--no-hidden", cwd=home)
    assert f"no numbered notebooks in {home.resolve() / 'notebooks'}" in proc.stdout


def test_link_points_at_the_hubs_git_pull_route():
    url = nbgitpuller_link("https://hub.example.edu", "https://git.example.edu/cs/pagedlab-student.git",
                           branch="main")
    assert url == ("https://hub.example.edu/hub/user-redirect/git-pull?repo=https%3A%2F%2Fgit.example.edu"
                   "%2Fcs%2Fpagedlab-student.git&branch=main&targetpath=pagedlab-student"
                   "&urlpath=lab%2Ftree%2Fpagedlab-student%2Fnotebooks%2F00_welcome.ipynb")
    assert "/hub/hub/" not in nbgitpuller_link("http://127.0.0.1:8000/hub/", "file:///srv/c.git")
    proc = _cli("link", "--hub", "hub.example.edu", "--repo", "https://x/y.git", cwd=REPO)
    assert proc.returncode == 2 and "--hub must be an http(s) URL" in proc.stderr
