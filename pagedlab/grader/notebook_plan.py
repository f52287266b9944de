"""What root knows of a course notebook before it runs it: read from root's own copy, never from
anything the run writes.

- which tasks a notebook serves, so `--tasks` picks the notebooks of those tasks (`select`);
- which tasks its cells ask about (graded cells and `require`), so root judges them first;
- its graded cells, by number and first line, so a failure names the cell and root can tell when
  a graded cell whose task root failed did not fail in the kernel.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..engine.ctrack import ALTERNATE_FILES
from ..spec import manifest

# A lettered notebook belongs to an optional track and runs when the submission has that track's
# file: 02c (HW3 in C) needs llm_memory.c, which a student who wrote memory_manager.py never wrote.
OPTIONAL_TRACKS = {re.compile(r"^\d\dc_.*\.ipynb$"): "llm_memory.c"}
_TASK = re.compile(r"""["'](task\d+)["']""")
_LOAD = re.compile(r"""pagedlab\.load\(\s*["'](\w+)["']""")
_GRADED = "graded.run("
MAX_NOTEBOOK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Cell:
    number: int  # among the notebook's code cells, from 1 (nbval's "Cell N" is N + 1 here)
    first_line: str
    source: str

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks this cell asks about (each "taskN" it names), in order."""
        return tuple(dict.fromkeys(t for t in _TASK.findall(self.source) if t in manifest.BY_ID))

    @property
    def graded(self) -> bool:
        return _GRADED in self.source


def optional_file(path: Path) -> str:
    """The student file an optional track's notebook runs on ('' for a notebook of the course)."""
    return next((file for pattern, file in OPTIONAL_TRACKS.items() if pattern.match(path.name)), "")


def code_cells(path: Path) -> list[Cell]:
    with open(path, "rb") as f:
        nb = json.loads(f.read(MAX_NOTEBOOK_BYTES))
    found = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        first = next((line.strip() for line in source.splitlines() if line.strip()), "")
        found.append(Cell(len(found) + 1, first, source))
    return found


def cell(path: Path, number: int) -> Cell | None:
    cells = code_cells(path)
    return cells[number - 1] if 0 < number <= len(cells) else None


def tasks_used(path: Path) -> set[str]:
    """Every task a code cell names: its graded cells' and its `require`s'."""
    return {t for c in code_cells(path) for t in c.tasks}


def serves(path: Path) -> set[str]:
    """The tasks a notebook is run for under `--tasks`: the tasks tasks.toml says it teaches; for
    an optional track's notebook (02c), the tasks its file stands in for (llm_memory.c: Tasks
    1-5); for a notebook without a task (00, 01, 03), the tasks of the student files it loads
    (`pagedlab.load("memory_manager")`: Tasks 1-5), since it runs that code."""
    own = {row.id for row in manifest.TABLE if row.notebook == path.stem}
    if own:
        return own
    track = optional_file(path)
    if track:
        return {row.id for row in manifest.TABLE
                if any(track in ALTERNATE_FILES.get(name, ()) for name in row.files)}
    loaded = {f"{name}.py" for c in code_cells(path) for name in _LOAD.findall(c.source)}
    return {row.id for row in manifest.TABLE if loaded & set(row.files)}


def select(paths: list[Path], tasks: list[str] | None) -> tuple[list[Path], list[Path]]:
    """(the notebooks to run, the ones `tasks` leaves out): all of them without `tasks`."""
    if not tasks:
        return list(paths), []
    wanted = {row.id for row in manifest.select(tasks)}
    chosen = [p for p in paths if serves(p) & wanted]
    return chosen, [p for p in paths if p not in chosen]
