"""A notebook's traceback pairs each line number with that line's text (pagedlab/tracebacks.py).

Notebook 01 once showed "----> 4 from pagedlab import simulator as sim" for an error on line 4,
`runs = [sim.simulate(...) for ...]`: IPython's fast path (taken for every Jupyter cell, whose
file name is a .py nobody can open) read a comprehension frame's lines from line 1.
"""

import linecache
import re
import sys

import pytest

pytest.importorskip("IPython")
from IPython.core import tbtools, ultratb  # noqa: E402

from pagedlab import tracebacks  # noqa: E402

CELL = "import os\n\nx = 1\nruns = [int(p) for p in ('1', 'z')]\n"


def _shown() -> str:
    name = "/nonexistent-pagedlab-cell/4242.py"  # as ipykernel names a cell: a .py nobody can open
    linecache.cache[name] = (len(CELL), None, CELL.splitlines(True), name)
    try:
        exec(compile(CELL, name, "exec"), {})
    except ValueError:
        etype, value, tb = sys.exc_info()
    text = ultratb.VerboseTB(theme_name="nocolor").text(etype, value, tb)
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _arrows(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.lstrip().startswith("---->")]


def test_a_comprehensions_frame_shows_its_own_line(monkeypatch):
    tracebacks.install()
    frame_info = tbtools.FrameInfo
    # IPython as it ships: the comprehension's frame says line 4 and shows line 1.
    monkeypatch.setattr(frame_info, "__init__", frame_info._pagedlab_original_init)
    assert "----> 4 import os" in _arrows(_shown())
    monkeypatch.undo()
    assert _arrows(_shown()) == ["----> 4 runs = [int(p) for p in ('1', 'z')]"] * 2
