"""`pagedlab assign`: fenced solution regions become stubs; the generator refuses bad fences."""

import subprocess
import sys
import textwrap

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


def test_check_reports_stale_missing_and_extra_files(tmp_path):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "a.py").write_text(PY_SOLUTION)
    (sol / "b.py").write_text("x = 1\n")
    assert len(assign.stale(sol, ex)) == 2  # both missing
    assert sorted(p.name for p in assign.write(sol, ex)) == ["a.py", "b.py"]
    assert assign.stale(sol, ex) == []
    (ex / "a.py").write_text("edited by hand\n")
    (ex / "c.py").write_text("nobody generated me\n")
    problems = assign.stale(sol, ex)
    assert any("a.py" in p and "differs" in p for p in problems)
    assert any("c.py" in p and "not generated" in p for p in problems)


def test_repository_exercises_are_up_to_date():
    """The CLI CI runs: exit 0 on this checkout, naming nothing stale."""
    proc = subprocess.run([sys.executable, "-m", "pagedlab", "assign", "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
