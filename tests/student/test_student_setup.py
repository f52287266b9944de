"""The student edition's own tests: the set-up works, whatever state exercises/ is in.

`pagedlab release` ships this folder as the student edition's `tests/` (the instructor's suite
needs solutions/ and stays behind); the instructor edition runs it too, so both editions prove
it. Nothing here grades: `./course test` runs `pagedlab grade --impl exercises` after it, as a
report, so untouched stubs pass these tests and score 0 there.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "exercises").is_dir():  # the instructor edition keeps this file in tests/student/
    ROOT = ROOT.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def test_torch_is_the_pinned_cpu_build():
    import torch

    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split()
                if "==" in line and not line.startswith("#"))
    assert torch.__version__.split("+")[0] == pins["torch"], (
        f"torch {torch.__version__} is installed, constraints.txt pins {pins['torch']}: "
        "delete .venv and run ./course test again")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert torch.equal(x @ x.T, torch.tensor([[5.0, 14.0], [14.0, 50.0]]))


@pytest.mark.task_wide
@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("*.py")), ids=lambda p: p.name)
def test_each_exercise_file_loads(path):
    """A syntax or import error in your file shows up here first, with its line."""
    import pagedlab

    module = pagedlab.load(path.stem, impl="exercises")
    assert module.__file__ == str(path)


def test_the_kernel_file_is_there_and_names_the_kernel():
    text = (ROOT / "exercises" / "paged_attention.cu").read_text()
    assert re.search(r"__global__\s+void\s+paged_attention_v1\s*\(", text)


def test_the_cpu_cuda_executor_runs_a_kernel():
    """pagedlab runs CUDA C on the CPU with your C++ compiler; this is what Task 10 needs."""
    from pagedlab import cuda

    code = r'''
    extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
      __shared__ float tile[64];
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      tile[threadIdx.x] = i < n ? x[i] : 0.f;
      __syncthreads();
      if (i < n) y[i] = a * tile[threadIdx.x] + y[i];
    }'''
    rng = np.random.default_rng(7)
    n = 150  # not a multiple of the block: the last block is partly idle
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    want = 2.5 * x.astype(np.float64) + y
    kernel = cuda.RawKernel(code, "axpy", backend="cpu", filename="axpy.cu")
    kernel((3,), (64,), (np.float32(2.5), x, y, np.int32(n)))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_the_memory_model_catches_a_use_after_free():
    import ctypes

    from pagedlab import cmem

    table = cmem.calloc_array(4, ctypes.c_int)
    table[2] = 7
    assert table[2] == 7
    cmem.free(table)
    with pytest.raises(cmem.HeapError):
        table[2]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_valid_and_its_code_parses(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"].startswith("python")
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        source = "\n".join(line for line in cell.source.splitlines()
                           if not line.lstrip().startswith(("%", "!")))
        try:
            ast.parse(source)
        except SyntaxError as exc:
            pytest.fail(f"{path.name} code cell {i}: {exc}")


def test_the_course_has_its_notebooks_and_marker():
    assert (ROOT / "notebooks" / "00_welcome.ipynb").is_file()
    assert len(NOTEBOOKS) >= 10
    marker = (ROOT / ".pagedlab-course").read_text()
    assert re.search(r'^edition\s*=\s*"(student|instructor)"', marker, re.M), marker
    json.loads((ROOT / "pagedlab" / "grader" / "expected.json").read_text())


@pytest.mark.task_wide
def test_each_task_keeps_its_graded_cell_in_its_notebook():
    """Deleting or editing a graded cell (`pagedlab.graded.run("taskN")`) loses that feedback in
    the notebook; the grader still grades the files. A notebook kept from before the entry point
    moved says `pagedlab.checks.run("taskN")`, which still runs the same checks."""
    import nbformat

    from pagedlab.spec import manifest

    for row in manifest.TABLE:
        nb = nbformat.read(ROOT / "notebooks" / f"{row.notebook}.ipynb", as_version=4)
        graded = [c for c in nb.cells if c.cell_type == "code" and any(f'{entry}.run("{row.id}")' in c.source for entry in ("graded", "checks"))]
        assert graded, f"notebooks/{row.notebook}.ipynb has no graded cell for {row.id} any more"
