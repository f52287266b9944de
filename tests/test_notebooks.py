"""Notebooks on the untouched exercises/, as a student first runs them, in one nbval session:

- every graded notebook fails under nbval at its first graded cell, while every cell before it
  (the explanations) still runs, checked outputs included;
- in the notebooks whose demos drive the student's code after a `require` cell, every later
  cell that needs an unfinished task says which task to finish, in one line, instead of a
  NameError or a stub's NotImplementedError traceback;
- the same with a kernel that never ends (notebook 08: the graded cell locates the hang once, and
  the demo cells after it say "needs Task 10" at once instead of waiting for the hang again) and
  with a fork_sequence that crashes the process (notebook 06, the other tasks finished).

The solutions side (each notebook passes top to bottom) is the nbval run of `./course test`
itself. Here the demo notebooks run up to their last cell that can fail on the stubs (the later
ones read nothing the stubs change) and every other graded notebook is cut just after its
first graded cell (the cells after it prove nothing on stubs); all of them run in one nbval
session with PAGEDLAB_IMPL=exercises: the same cells execute in the same order as in the full
notebook, so the full notebook fails there too. The hang and crash copies run in the same
session, each with a first cell that points PAGEDLAB_IMPL at its folder, and keep only the
set-up cell and the cells from the graded one on. A conftest.py beside the copies records each
cell's nbval outcome, what it printed and the errors the kernel raised, so all checks read one run.
"""

import ast
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


def _names(source: str) -> tuple[set, set]:
    """(names a cell reads from earlier cells, names it binds); a name it binds on a line before
    the first that reads it, or a comprehension's own, is its own. %magic and !shell lines are left out."""
    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    own = {n.id for c in ast.walk(tree) if isinstance(c, ast.comprehension) for n in ast.walk(c.target)
           if isinstance(n, ast.Name)}
    augmented = {id(n.target) for n in ast.walk(tree) if isinstance(n, ast.AugAssign)}
    first_read, first_bound = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            reads = isinstance(node.ctx, ast.Load) or id(node) in augmented
            table = first_read if reads else first_bound
            table[node.id] = min(table.get(node.id, node.lineno), node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.alias)):
            name = node.name if not isinstance(node, ast.alias) else (node.asname or node.name).split(".")[0]
            first_bound[name] = min(first_bound.get(name, node.lineno), node.lineno)
    read = {n for n, line in first_read.items() if n not in own and not first_bound.get(n, line) < line}
    return read, set(first_bound) | own


def _last_cell_that_can_fail(code) -> int:
    """The last code cell whose outcome on the stubs can differ from the solutions': one that runs
    a graded cell or a require (a cell reaching a task without one fails test_demo_cells), or reads
    a name such a cell binds (when that demo stopped, the name says why). The cells after it read
    only what never touched the student's code and behave as on the solutions, where the nbval run
    of `./course test` runs them; here they would only repeat it (09's sharing measurements: 6 CPU-s)."""
    last, tainted = -1, set()
    for i, cell in enumerate(code):
        read, bound = _names(cell.source)
        if GRADED.search(cell.source) or REQUIRE.search(cell.source) or read & tainted:
            last = i
            tainted |= bound
    return last


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
    """({notebook: first graded code cell}, {notebook: {cell: record}}, the session's log)."""
    run_dir = tmp_path_factory.mktemp("on-exercises")
    graded_cells = {}
    for path in GRADED_NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        graded = graded_cells[path.name] = _first_graded(nb)
        # Demo notebooks: up to the last cell that can fail on the stubs; the others: the graded cell.
        cut = _last_cell_that_can_fail(_code_cells(nb)) if path.stem in DEMO_NOTEBOOKS else graded
        code_seen, keep = -1, []
        for cell in nb.cells:
            keep.append(cell)
            if cell.cell_type == "code":
                code_seen += 1
                if code_seen == cut:
                    break
        nb.cells = keep
        nbformat.write(nb, run_dir / path.name)
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
    return graded_cells, cells, proc.stdout[-3000:], run_dir


@pytest.mark.xdist_group("notebook-cuts")  # one worker runs the session once for all (conftest.py)
@pytest.mark.parametrize("path", GRADED_NOTEBOOKS, ids=lambda p: p.name)
def test_graded_notebook_fails_on_exercises_only_at_its_graded_cell(path, exercises_run):
    graded_cells, cells, log, _ = exercises_run
    graded, ran = graded_cells[path.name], cells.get(path.name, {})
    before = {cell: ran.get(cell, {}).get("outcome") for cell in range(graded)}
    assert all(s == "passed" for s in before.values()), f"explanatory cells must run on exercises: {before}\n{log}"
    assert ran.get(graded, {}).get("outcome") == "failed", f"graded cell {graded} must fail on the untouched exercises\n{log}"


@pytest.mark.slow
@pytest.mark.xdist_group("notebook-cuts")
@pytest.mark.parametrize("name", DEMO_NOTEBOOKS)
def test_demo_cells_on_unfinished_tasks_say_which_task_in_one_line(name, exercises_run):
    _, cells, log, _ = exercises_run
    code = _code_cells(nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4))
    ran = cells.get(f"{name}.ipynb", {})
    last = _last_cell_that_can_fail(code)
    assert last >= _first_graded(nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)), name
    assert sorted(ran) == list(range(last + 1)), f"{name}: not every cell up to {last} ran\n{log}"
    errors = [(i, e) for i, row in sorted(ran.items()) for e in row["errors"]]
    assert errors, f"{name}: nothing failed on the untouched exercises (did the run use them?)"
    required = [i for i, c in enumerate(code) if "graded.require(" in c.source]
    assert required, f"{name} has no require cell any more"
    for index, error in errors:
        where = f"{name} cell {index}: {error['ename']}: {error['evalue'][:200]}"
        assert error["ename"] not in ("NameError", "NotImplementedError"), where
        if index >= required[0] and "graded.run(" not in code[index].source:
            assert error["ename"] == "CheckFailure" and error["lines"] == 1, where
            assert "needs Task" in error["evalue"] and "to pass first" in error["evalue"], where


def _one_line_needs(error) -> bool:
    return (error["ename"] == "CheckFailure" and error["lines"] == 1
            and "needs Task" in error["evalue"] and "to pass first" in error["evalue"])


@pytest.mark.slow
@pytest.mark.xdist_group("notebook-cuts")
def test_a_hanging_kernel_is_located_once_and_the_demos_after_it_do_not_wait_for_it(exercises_run):
    _, cells, log, run_dir = exercises_run
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
    _, cells, log, run_dir = exercises_run
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
