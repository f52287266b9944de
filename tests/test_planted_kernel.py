"""The kernel notebook 08 ships for its missing-barrier demo: wrong under some schedule, right
once the barrier is back, and no text of Task 10's solution in it (it ships to students)."""

import re
from importlib.resources import files

import numpy as np

from pagedlab import cuda
from pagedlab.loader import ROOT

PLANTED = (files("pagedlab") / "kernels_demo" / "planted_missing_barrier.cu").read_text()


def _softmax_rows(text, rows, schedule):
    kernel = cuda.RawKernel(text, "softmax_rows", backend="cpu", filename="softmax_rows.cu")
    out = np.full_like(rows, np.nan)  # unwritten elements stay NaN
    kernel((len(rows),), (128,), (out, rows, np.int32(rows.shape[1])), schedule=schedule, timeout=30)
    return out


def test_the_bug_shows_under_one_schedule_and_the_barrier_fixes_it():
    rows = (2 * np.random.default_rng(0).standard_normal((3, 500))).astype(np.float32)
    exact = np.exp(rows.astype(np.float64) - rows.max(axis=1, keepdims=True))
    exact /= exact.sum(axis=1, keepdims=True)
    repaired = PLANTED.replace("  // BARRIER\n", "  __syncthreads();\n")
    assert repaired != PLANTED
    wrong = []
    for schedule in cuda.SCHEDULES:
        assert np.allclose(_softmax_rows(repaired, rows, schedule), exact, rtol=1e-5, atol=1e-7), schedule
        if not np.allclose(_softmax_rows(PLANTED, rows, schedule), exact, rtol=1e-5, atol=1e-7):
            wrong.append(schedule)
    assert wrong and len(wrong) < len(cuda.SCHEDULES), f"the demo needs some schedules to hide the bug: {wrong}"


def test_no_line_of_the_task10_solution_is_in_the_planted_kernel():
    solution = (ROOT / "solutions" / "paged_attention.cu").read_text()
    regions = re.findall(r"BEGIN SOLUTION[^\n]*\n(.*?)// END SOLUTION", solution, re.S)
    assert regions
    solved = {line.strip() for region in regions for line in region.splitlines()}
    trivial = {"", "}", "{", "__syncthreads();"}
    shared = {line.strip() for line in PLANTED.splitlines()} & solved - trivial
    assert not shared, shared
