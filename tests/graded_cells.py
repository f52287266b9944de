"""Run notebooks as a student would and report what each graded cell showed (JSON on stdout).

    python tests/graded_cells.py [--graded-only] NOTEBOOK...   (run from anywhere; the kernel
                                                  starts in the notebook's folder, as Jupyter does)

--graded-only runs `import pagedlab` and the graded cells, nothing else: the explanations and
demos around them already run under nbval in the instructor's CI, and a graded cell needs none of
them (it grades the student's files in a child process).

A graded cell is one that calls `pagedlab.graded.run(...)`. Errors are allowed so every graded
cell runs; the caller decides what a stub's or a solution's cell should have shown.
"""

import json
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    data = output.get("data", {})
    return data.get("text/plain", "")


def _graded(cell) -> bool:
    return cell.cell_type == "code" and "pagedlab.graded.run(" in cell.source


def run(path: Path, graded_only: bool = False) -> dict:
    nb = nbformat.read(path, as_version=4)
    if graded_only:
        nb.cells = [nbformat.v4.new_code_cell("import pagedlab")] + [c for c in nb.cells if _graded(c)]
    began = time.perf_counter()
    NotebookClient(nb, timeout=600, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    cells = []
    for index, cell in enumerate(nb.cells):
        if _graded(cell):
            outputs = cell.get("outputs", [])
            cells.append({"index": index, "source": cell.source.strip(),
                          "error": any(o.get("output_type") == "error" for o in outputs),
                          "text": "".join(_text(o) for o in outputs)})
    return {"notebook": path.name, "seconds": round(time.perf_counter() - began, 1), "graded": cells}


if __name__ == "__main__":
    only = "--graded-only" in sys.argv[1:]
    print(json.dumps([run(Path(p).resolve(), only) for p in sys.argv[1:] if p != "--graded-only"]))
