"""Notebooks on unfinished work that crashes or hangs, in one nbval session:

- a kernel that never ends (notebook 08: the graded cell locates the hang once, and the demo
  cells after it say "needs Task 10" at once instead of waiting for the hang again);
- a fork_sequence that crashes the process (notebook 06, the other tasks finished): every demo
  cell built on it says Task 3 in one line.

Every notebook on the untouched stubs (each graded cell fails there, the explanations before it
run, every demo cell on an unfinished task says which task in one line) is the student edition's
own run, as a student gets it: `tests/test_release_integration.py` (one kernel through all of
them in a fresh clone of the edition). The solutions side (each notebook passes top to bottom) is
the nbval run of `./course test` itself. The hang and crash copies each start with a cell that
points PAGEDLAB_IMPL at its folder, and keep only the set-up cell and the cells from the graded
one on. A conftest.py beside the copies records each cell's nbval outcome, what it printed and
the errors the kernel raised, so all checks read one run.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))  # 02c_hw3_in_c too
# pagedlab.graded.run("taskN") (checks.run: a student's notebook saved before the entry point moved)
GRADED = re.compile(r"^\s*(pagedlab\.)?(graded|checks)\.run\(", re.MULTILINE)
REQUIRE = re.compile(r"^\s*(pagedlab\.)?graded\.require\(", re.MULTILINE)
# The notebooks whose demos drive the student's code after a require (measured before: 02, 04
# and 06 cascaded into NameErrors, 10 into NotImplementedError tracebacks): they run to their
# last cell that can fail.
DEMO_NOTEBOOKS = sorted(p.stem for p in NOTEBOOKS if REQUIRE.search(p.with_suffix(".py").read_text()))
# The reference kernel spinning forever at its first region (on the exercises' kernel the later
# regions would still be stubs, and those say "not implemented yet" before any launch), and a
# fork_sequence that writes through NULL.
_LOGITS = "  // BEGIN SOLUTION Task 10: logits, scale * q.k for every token, found through the block table\n"
HANG = (_LOGITS, _LOGITS + "  volatile int spin = 1;\n  while (spin) { }  // never ends\n")
CRASH = ("    ### BEGIN SOLUTION Task 3: fork_sequence\n",
         "    ctypes.memmove(0, 1, 64)  # a write through NULL: the process dies\n")
# copy name -> (notebook, the folder's base, the planted file, the plant)
PLANTED = {"08_cuda_kernel-hang": ("08_cuda_kernel", "solutions", "paged_attention.cu", HANG),
           "06_paged_kv_cache-crash": ("06_paged_kv_cache", "solutions", "memory_manager.py", CRASH)}

# Loaded by the nbval session from the copies' folder: one JSON line per cell that ran.
RECORDER = '''
import json
import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when != "call" or not hasattr(item, "cell_num"):
        return
    outputs = item.test_outputs or []
    errors = [{"ename": o.get("ename"), "evalue": o.get("evalue"), "lines": len(o.get("traceback") or [])}
              for o in outputs if o.get("output_type") == "error"]
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    with open(os.environ["PAGEDLAB_CELL_RECORD"], "a") as f:
        f.write(json.dumps({"notebook": item.path.name, "cell": item.cell_num, "outcome": report.outcome,
                            "errors": errors, "printed": printed[:20000], "seconds": report.duration}) + "\\n")
'''


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _first_graded(nb):
    return next((i for i, c in enumerate(_code_cells(nb)) if GRADED.search(c.source)), None)


GRADED_NOTEBOOKS = [p for p in NOTEBOOKS if _first_graded(nbformat.read(p, as_version=4)) is not None]


def test_the_course_has_its_notebooks():
    # The graded cells are found by their text: when it changes, the tests below must not go empty.
    assert len(GRADED_NOTEBOOKS) >= 7, [p.name for p in GRADED_NOTEBOOKS]
    assert "02c_hw3_in_c.ipynb" in {p.name for p in GRADED_NOTEBOOKS}
    assert {f"{name}.ipynb" for name in DEMO_NOTEBOOKS} <= {p.name for p in GRADED_NOTEBOOKS}
    names = {p.stem.split("_")[0] for p in NOTEBOOKS}
    assert names >= {f"{n:02d}" for n in range(10)}, f"missing notebooks: {sorted({f'{n:02d}' for n in range(10)} - names)}"
    assert (ROOT / "notebooks" / "00_welcome.ipynb").exists()


@pytest.fixture(scope="module")
def exercises_run(tmp_path_factory):
    """({notebook: {cell: record}}, the session's log, its folder) of the planted copies."""
    run_dir = tmp_path_factory.mktemp("on-exercises")
    for copy, (notebook, base, filename, (old, new)) in PLANTED.items():
        folder = run_dir / copy
        shutil.copytree(ROOT / base, folder)
        text = (folder / filename).read_text()
        assert text.count(old) == 1, f"the plant for {copy} no longer fits {base}/{filename}"
        (folder / filename).write_text(text.replace(old, new))
        nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
        code = _code_cells(nb)
        last = max(i for i, c in enumerate(code) if GRADED.search(c.source))
        start = last if copy.endswith("-hang") else last + 1  # the hang: its graded cell too
        point = nbformat.v4.new_code_cell(f"import os\nos.environ['PAGEDLAB_IMPL'] = {str(folder)!r}")
        nb.cells = [point, code[0], *code[start:]]
        nbformat.write(nb, run_dir / f"{copy}.ipynb")
    (run_dir / "conftest.py").write_text(RECORDER)
    record = run_dir / "cells.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-cell-timeout=300", "-p", "no:cacheprovider", f"--rootdir={run_dir}",
         "--nbval-sanitize-with", str(ROOT / "notebooks" / "nbval.cfg"), "-rA", "-q", *sorted(map(str, run_dir.glob("*.ipynb")))],
        cwd=run_dir, capture_output=True, text=True, timeout=900,
        # PYTHONPATH: the kernels import this checkout's pagedlab even where the venv's editable
        # install points at another one (a git worktree).
        env={**os.environ, "PAGEDLAB_IMPL": "exercises", "PAGEDLAB_CELL_RECORD": str(record),
             "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))},
    )
    cells = {}
    for line in record.read_text().splitlines() if record.exists() else []:
        row = json.loads(line)
        cells.setdefault(row["notebook"], {})[row["cell"]] = row
    return cells, proc.stdout[-3000:], run_dir


def _one_line_needs(error) -> bool:
    return (error["ename"] == "CheckFailure" and error["lines"] == 1
            and "needs Task" in error["evalue"] and "to pass first" in error["evalue"])


@pytest.mark.slow
@pytest.mark.xdist_group("notebook-cuts")
def test_a_hanging_kernel_is_located_once_and_the_demos_after_it_do_not_wait_for_it(exercises_run):
    cells, log, run_dir = exercises_run
    code = _code_cells(nbformat.read(run_dir / "08_cuda_kernel-hang.ipynb", as_version=4))
    ran = cells.get("08_cuda_kernel-hang.ipynb", {})
    assert sorted(ran) == list(range(len(code))), f"not every cell ran\n{log}"
    graded = ran[2]
    assert GRADED.search(code[2].source) and graded["outcome"] == "failed", log
    assert "KernelTimeout" in graded["printed"] and "paged_attention.cu:" in graded["printed"], graded["printed"]
    demos = [i for i, c in enumerate(code) if REQUIRE.search(c.source)]
    assert len(demos) >= 4, "the profile, CuPy, dense and end-to-end cells each require Task 10"
    for index in demos:
        where = f"cell {index}: {ran[index]['errors']}"
        assert len(ran[index]["errors"]) == 1 and _one_line_needs(ran[index]["errors"][0]), where
        # The hang's verdict is remembered: no demo waits for the watchdog again.
        assert ran[index]["seconds"] < graded["seconds"] / 2, (where, ran[index]["seconds"], graded["seconds"])
    errors = [(i, e["ename"]) for i, row in ran.items() for e in row["errors"] if i not in demos and i != 2]
    assert not errors, errors


@pytest.mark.slow
@pytest.mark.xdist_group("notebook-cuts")
def test_a_crashing_task_stops_each_demo_cell_with_one_line_naming_it(exercises_run):
    """Tasks 1, 2, 4-7 finished, fork_sequence kills its process: the demo that forks says Task 3
    in one line, and so does every later cell built on it, even where its own require passes."""
    cells, log, run_dir = exercises_run
    code = _code_cells(nbformat.read(run_dir / "06_paged_kv_cache-crash.ipynb", as_version=4))
    ran = cells.get("06_paged_kv_cache-crash.ipynb", {})
    assert sorted(ran) == list(range(len(code))), f"not every cell ran\n{log}"
    failed = {i: row["errors"] for i, row in ran.items() if row["errors"]}
    assert len(failed) >= 4, failed  # the fork demo, the K/V writes, their drawing, copy-on-write
    for index, errors in failed.items():
        assert len(errors) == 1 and _one_line_needs(errors[0]), f"cell {index}: {errors}"
        assert "needs Task 3 " in errors[0]["evalue"], f"cell {index}: {errors}"
    written = next(i for i, c in enumerate(code) if 'require("task6", "task7")' in c.source)
    assert written in failed, "the K/V cell's own require passes; the engine it reads was never made"
