"""`pagedlab assign`: fenced solution regions become stubs; the generator refuses bad fences."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pagedlab import assign
from pagedlab.assign import AssignError, make_exercise

PY_SOLUTION = textwrap.dedent('''\
    import math


    def ceil_blocks(n):
        """Blocks needed for n records."""
        ### BEGIN SOLUTION Task 2: ceil_blocks
        return math.ceil(n / 16)
        ### END SOLUTION


    class Engine:
        def grow(self):
            if True:
                ### BEGIN SOLUTION
                self.size += 1
                return self.size
                ### END SOLUTION
''')


def test_python_region_becomes_task_named_stub():
    out = make_exercise(PY_SOLUTION, "solutions/x.py")
    assert "math.ceil" not in out and "self.size += 1" not in out
    assert '    # YOUR CODE HERE (Task 2: ceil_blocks)\n    raise NotImplementedError("Task 2: ceil_blocks")\n' in out
    # Everything outside the fences is kept verbatim, docstring included.
    assert out.startswith("import math\n\n\ndef ceil_blocks(n):\n    \"\"\"Blocks needed for n records.\"\"\"\n")


def test_stub_keeps_indentation_and_names_enclosing_function_without_label():
    out = make_exercise(PY_SOLUTION, "solutions/x.py")
    assert '            # YOUR CODE HERE (grow)\n            raise NotImplementedError("grow")\n' in out


def test_generated_python_stub_runs_and_raises():
    namespace = {}
    exec(compile(make_exercise(PY_SOLUTION, "x.py"), "x.py", "exec"), namespace)
    with pytest.raises(NotImplementedError, match="Task 2: ceil_blocks"):
        namespace["ceil_blocks"](3)


def test_cuda_region_leaves_output_unwritten():
    src = textwrap.dedent("""\
        extern "C" __global__ void scale(float* out, const float* x, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i >= n) return;
            // BEGIN SOLUTION Task 10: scale
            out[i] = 2.0f * x[i];
            // END SOLUTION
        }
        __device__ float twice(float v) {
            // BEGIN SOLUTION Task 10: twice | return 0.0f;
            return 2.0f * v;
            // END SOLUTION
        }
    """)
    out = make_exercise(src, "solutions/k.cu")
    assert "out[i] = 2.0f" not in out and "return 2.0f * v" not in out
    assert "    // YOUR CODE HERE (Task 10: scale)\n" in out
    assert "    return;\n}" in out
    assert "    return 0.0f;\n}" in out  # the `| stub` override for a value-returning helper


def test_files_without_fences_or_unknown_suffix_are_copied_verbatim():
    assert make_exercise("x = 1\n", "a.py") == "x = 1\n"
    assert make_exercise("### BEGIN SOLUTION\n", "notes.txt") == "### BEGIN SOLUTION\n"


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("a = 1\n### BEGIN SOLUTION\nb = 2\n", 2, "never closed"),
        ("a = 1\n### END SOLUTION\n", 2, "without a BEGIN"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", 2, "cannot nest"),
    ],
)
def test_bad_fences_name_file_and_line(text, line, problem):
    with pytest.raises(AssignError, match=rf"solutions/m\.py:{line}: .*{problem}"):
        make_exercise(text, "solutions/m.py")


def test_check_reports_missing_and_stale_files_but_not_edited_ones(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "a.py").write_text(PY_SOLUTION)
    (sol / "b.py").write_text("x = 1\n")
    assert len(assign.stale(sol, ex)) == 2  # both missing
    assert sorted(p.name for p in assign.write(sol, ex).written) == ["a.py", "b.py"]
    assert assign.stale(sol, ex) == []
    (ex / "a.py").write_text("edited by hand\n")      # someone's work: not stale
    (ex / "c.py").write_text("nobody generated me\n")  # someone's own file: not stale
    (sol / "b.py").write_text("x = 2\n")              # the instructor changed solutions/
    s = assign.survey(sol, ex)
    assert [p.name for p in s.edited] == ["a.py"] and [p.name for p in s.extra] == ["c.py"]
    assert assign.stale(sol, ex) == ["exercises/b.py (differs from what solutions/ generates)"]


def _generated(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "mm.py").write_text(PY_SOLUTION)
    (sol / "other.py").write_text("y = 1\n")
    assign.write(sol, ex)
    return sol, ex


def test_edited_exercise_is_kept_byte_identical(tmp_path):
    sol, ex = _generated(tmp_path)
    mine = b"def ceil_blocks(n):\n    return -(-n // 16)  # my answer\r\n\xc3\xa9\n"
    (ex / "mm.py").write_bytes(mine)
    (sol / "mm.py").write_text(PY_SOLUTION + "\n# a new comment\n")  # would change the stub too
    done = assign.write(sol, ex)
    assert [p.name for p in done.kept] == ["mm.py"] and done.written == [] and done.backup is None
    assert (ex / "mm.py").read_bytes() == mine
    assert not (tmp_path / "backups").exists()
    assign.write(sol, ex)  # a second run is just as careful
    assert (ex / "mm.py").read_bytes() == mine


def test_force_backs_up_the_old_bytes_then_regenerates(tmp_path):
    sol, ex = _generated(tmp_path)
    mine = b"# my work\nx = 42\n"
    (ex / "mm.py").write_bytes(mine)
    done = assign.write(sol, ex, force=True)
    assert done.backup is not None and done.backup.parent == tmp_path / "backups"
    assert (done.backup / "exercises" / "mm.py").read_bytes() == mine
    assert (ex / "mm.py").read_text() == make_exercise(PY_SOLUTION, "solutions/mm.py")
    assert [p.name for p in done.written] == ["mm.py"]
    assert assign.survey(sol, ex).edited == []  # the manifest now records the new stub
    (ex / "mm.py").write_bytes(b"again\n")
    second = assign.write(sol, ex, force=True)
    assert second.backup != done.backup and (second.backup / "exercises" / "mm.py").read_bytes() == b"again\n"
    assert (done.backup / "exercises" / "mm.py").read_bytes() == mine  # earlier backup untouched


def test_untouched_stale_file_is_regenerated_and_check_fails_until_then(tmp_path):
    sol, ex = _generated(tmp_path)
    (sol / "other.py").write_text("y = 2\n")
    assert assign.stale(sol, ex) == ["exercises/other.py (differs from what solutions/ generates)"]
    done = assign.write(sol, ex)
    assert [p.name for p in done.written] == ["other.py"] and done.kept == []
    assert (ex / "other.py").read_text() == "y = 2\n" and assign.stale(sol, ex) == []


def test_without_a_manifest_a_differing_file_counts_as_edited(tmp_path):
    sol, ex = _generated(tmp_path)
    (ex / assign.MANIFEST_NAME).unlink()
    (sol / "other.py").write_text("y = 3\n")
    done = assign.write(sol, ex)
    assert [p.name for p in done.kept] == ["other.py"] and (ex / "other.py").read_text() == "y = 1\n"


def test_check_wants_every_generated_file_recorded(tmp_path):
    """After a merge that brought exercises without their records, CI says so; assign records."""
    sol, ex = _generated(tmp_path)
    (ex / assign.MANIFEST_NAME).unlink()
    assert sorted(assign.stale(sol, ex)) == [
        f"exercises/{n} (up to date, but not recorded in exercises/{assign.MANIFEST_NAME})" for n in ("mm.py", "other.py")]
    assert assign.write(sol, ex).written == []  # nothing rewritten, only recorded
    assert assign.stale(sol, ex) == []


def test_untouched_file_solutions_dropped_is_removed_edited_one_is_not(tmp_path):
    sol, ex = _generated(tmp_path)
    (sol / "other.py").unlink()
    assert assign.stale(sol, ex) == ["exercises/other.py (generated earlier, but solutions/ no longer has it)"]
    assert [p.name for p in assign.write(sol, ex).removed] == ["other.py"]
    assert not (ex / "other.py").exists() and assign.stale(sol, ex) == []
    (sol / "mm.py").unlink()
    (ex / "mm.py").write_text("mine\n")
    assert assign.write(sol, ex).removed == [] and (ex / "mm.py").read_text() == "mine\n"


# ---- the commands, run in a copy of the course ---------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def course_copy(tmp_path):
    """A copy of the course that `python -m pagedlab` (run inside it) treats as its own."""
    for name in ("pagedlab", "solutions", "exercises", "tools"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("course", "pyproject.toml", "constraints.txt", "requirements.lock", ".pagedlab-course"):
        shutil.copy2(ROOT / name, tmp_path / name)
        # Older than any venv's install stamp: `course` in the copy must never reinstall the
        # (shared) venv it is pointed at.
        os.utime(tmp_path / name, (0, 0))
    return tmp_path


def _pagedlab(cwd, *args):
    proc = subprocess.run([sys.executable, "-m", "pagedlab", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return proc.returncode, proc.stdout + proc.stderr


def test_assign_command_refuses_edited_files_and_force_prints_the_backup(course_copy):
    target = course_copy / "exercises" / "memory_manager.py"
    mine = target.read_bytes().replace(b"# YOUR CODE HERE", b"pass  # started on it", 1)
    target.write_bytes(mine)
    code, out = _pagedlab(course_copy, "assign")
    assert code == 1 and "exercises/memory_manager.py" in out and "kept" in out, out
    assert target.read_bytes() == mine
    code, out = _pagedlab(course_copy, "assign", "--force")
    assert code == 0, out
    backups = list((course_copy / "backups").glob("assign-*/exercises/memory_manager.py"))
    assert len(backups) == 1 and backups[0].read_bytes() == mine
    assert str(backups[0].parent.parent.relative_to(course_copy)) in out
    assert b"pass  # started on it" not in target.read_bytes()


def test_check_on_a_students_edited_checkout_passes_without_suggesting_assign(course_copy):
    for name in ("memory_manager.py", "paged_attention.cu"):
        path = course_copy / "exercises" / name
        path.write_text(path.read_text() + "\n// my notes\n" if name.endswith(".cu") else path.read_text() + "\n# my notes\n")
    code, out = _pagedlab(course_copy, "assign", "--check")
    assert code == 0, out
    assert "student's work" in out and "exercises/memory_manager.py" in out and "exercises/paged_attention.cu" in out
    assert "pagedlab assign" not in out and "--force" not in out


def test_course_test_assign_step_on_an_edited_checkout(course_copy):
    """`./course test` runs `assign --check` first: a student's edits must not stop it."""
    path = course_copy / "exercises" / "buddy.py"
    path.write_text(path.read_text().replace("# YOUR CODE HERE", "# YOUR CODE HERE (started)", 1))
    proc = subprocess.run([str(course_copy / "course"), "test", "--version"], cwd=course_copy,
                          capture_output=True, text=True,
                          env={**os.environ, "PAGEDLAB_VENV": str(Path(sys.executable).parent.parent),
                               "PYTHONDONTWRITEBYTECODE": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "exercises/buddy.py" in out and "student's work" in out
    assert "pagedlab assign" not in out


def test_check_fails_for_the_instructor_when_solutions_changed(course_copy):
    sol = course_copy / "solutions" / "buddy.py"
    sol.write_text(sol.read_text() + "\n\nEXTRA_CONSTANT = 1\n")
    code, out = _pagedlab(course_copy, "assign", "--check")
    assert code == 1 and "exercises/buddy.py" in out and "out of date with solutions/" in out, out
    code, out = _pagedlab(course_copy, "assign")
    assert code == 0 and "wrote exercises/buddy.py" in out, out
    assert _pagedlab(course_copy, "assign", "--check")[0] == 0


def test_student_copy_hides_instructor_commands_and_assign_changes_nothing(course_copy):
    shutil.rmtree(course_copy / "solutions")
    before = {p.name: p.read_bytes() for p in (course_copy / "exercises").iterdir()}
    code, out = _pagedlab(course_copy, "--help")
    assert code == 0 and "grade" in out and "assign" not in out and "release" not in out, out
    code, out = _pagedlab(course_copy, "assign", "--force")
    assert code == 2 and "instructor command" in out and "Nothing was changed" in out
    assert {p.name: p.read_bytes() for p in (course_copy / "exercises").iterdir()} == before


def test_repository_exercises_are_up_to_date():
    """The CLI CI runs: exit 0 on this checkout, naming nothing stale."""
    proc = subprocess.run([sys.executable, "-m", "pagedlab", "assign", "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
