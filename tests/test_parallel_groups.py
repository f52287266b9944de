"""`./course test` runs on every core: tests of one xdist group, and the cells of one notebook,
must share a worker (conftest.py). pytest 9.2 silently broke xdist's groups once
(pytest-dev/pytest-xdist#1386): this runs a small suite the way `./course test` does and looks.
"""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent

GROUPED = textwrap.dedent('''
    import json, os
    import pytest

    def _record(name):
        with open("workers.jsonl", "a") as f:
            f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")

    @pytest.mark.parametrize("i", range(6))
    @pytest.mark.xdist_group("users")
    def test_user(i):
        _record(f"user{i}")

    @pytest.mark.parametrize("i", range(6))
    @pytest.mark.xdist_group("installed-venv")
    def test_venv(i):
        _record(f"venv{i}")

    @pytest.mark.parametrize("i", range(6))
    def test_free(i):
        _record(f"free{i}")
''')


def _notebook(path: Path) -> None:
    """Each cell needs the one before it: split over two kernels, a cell fails with NameError."""
    cells = ["x = 1"] + [f"x += 1\nassert x == {n}" for n in range(2, 8)]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells],
                                            metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                     "display_name": "Python 3"}}), path)


def test_groups_and_notebook_cells_stay_on_one_worker(tmp_path):
    shutil.copy2(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    _notebook(tmp_path / "chain.ipynb")
    # Three interpreters start pytest here: the plugins the grouping never meets stay out (hypothesis
    # and anyio cost each of them 0.9 CPU-s of imports).
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                           "--nbval-lax", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio",
                           "-q", f"--rootdir={tmp_path}", "test_grouped.py", "chain.ipynb"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "25 passed" in proc.stdout, proc.stdout[-1000:]  # 18 tests and the notebook's 7 cells
    seen = dict(json.loads(line) for line in (tmp_path / "workers.jsonl").read_text().splitlines())
    assert len({seen[f"user{i}"] for i in range(6)}) == 1, f"the 'users' group ran on several workers: {seen}"
    assert len({seen[f"venv{i}"] for i in range(6)}) == 1, f"the 'installed-venv' group ran on several workers: {seen}"
