"""Notebooks grade honestly: with the untouched exercises/ every graded notebook fails under
nbval at its first graded cell, while every cell before it (the explanations) still runs.

The solutions side (each notebook passes top to bottom) is the nbval run of `./course test`
itself. Here each graded notebook is cut just after its first graded cell and all cuts run in
one nbval session with PAGEDLAB_IMPL=exercises: the same cells execute in the same order as in
the full notebook, so the full notebook fails there too.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# pagedlab.graded.run("taskN") (checks.run: a student's notebook saved before the entry point moved)
GRADED = re.compile(r"^\s*(pagedlab\.)?(graded|checks)\.run\(", re.MULTILINE)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _first_graded(nb):
    return next((i for i, c in enumerate(_code_cells(nb)) if GRADED.search(c.source)), None)


GRADED_NOTEBOOKS = [p for p in NOTEBOOKS if _first_graded(nbformat.read(p, as_version=4)) is not None]


def test_the_course_has_its_notebooks():
    # The graded cells are found by their text: when it changes, the tests below must not go empty.
    assert len(GRADED_NOTEBOOKS) >= 6, [p.name for p in GRADED_NOTEBOOKS]
    names = {p.stem.split("_")[0] for p in NOTEBOOKS}
    assert names >= {f"{n:02d}" for n in range(10)}, f"missing notebooks: {sorted({f'{n:02d}' for n in range(10)} - names)}"
    assert (ROOT / "notebooks" / "00_welcome.ipynb").exists()


@pytest.fixture(scope="module")
def exercises_run(tmp_path_factory):
    cut_dir = tmp_path_factory.mktemp("cut")
    cuts = {}
    for path in GRADED_NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        graded = _first_graded(nb)
        code_seen, keep = -1, []
        for cell in nb.cells:
            keep.append(cell)
            if cell.cell_type == "code":
                code_seen += 1
                if code_seen == graded:
                    break
        nb.cells = keep
        cut = cut_dir / path.name
        nbformat.write(nb, cut)
        cuts[path.name] = graded
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-cell-timeout=300", "-p", "no:cacheprovider", f"--rootdir={cut_dir}",
         "--nbval-sanitize-with", str(ROOT / "notebooks" / "nbval.cfg"), "-rA", "-q", *sorted(map(str, cut_dir.glob("*.ipynb")))],
        cwd=cut_dir, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PAGEDLAB_IMPL": "exercises"},
    )
    outcomes = {}
    for status, name, cell in re.findall(r"^(PASSED|FAILED|ERROR) \S*?([0-9]{2}_\w+\.ipynb)::Cell (\d+)", proc.stdout, re.MULTILINE):
        outcomes[(name, int(cell))] = status
    return cuts, outcomes, proc.stdout[-3000:]


@pytest.mark.xdist_group("notebook-cuts")  # one worker runs the cuts once for all (conftest.py)
@pytest.mark.parametrize("path", GRADED_NOTEBOOKS, ids=lambda p: p.name)
def test_graded_notebook_fails_on_exercises_only_at_its_graded_cell(path, exercises_run):
    cuts, outcomes, log = exercises_run
    graded = cuts[path.name]
    before = {cell: outcomes.get((path.name, cell)) for cell in range(graded)}
    assert all(s == "PASSED" for s in before.values()), f"explanatory cells must run on exercises: {before}\n{log}"
    assert outcomes.get((path.name, graded)) == "FAILED", f"graded cell {graded} must fail on the untouched exercises\n{log}"
