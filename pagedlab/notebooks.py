"""Keep the course notebooks as text: pair, clean and re-run them (instructors' tool).

Each notebook is a jupytext ``py:percent`` source ``notebooks/NN_name.py`` paired with the
``notebooks/NN_name.ipynb`` students open. The ``.py`` holds the cells (reviewable, linted);
the ``.ipynb`` adds only the outputs of cells whose first line is ``# NBVAL_CHECK_OUTPUT``,
which nbval compares on every run. Everything else a kernel leaves behind (other outputs,
execution counts, widget state, the interpreter's version) is noise in a diff, so it is
stripped here. Checked cells are numbered 1, 2, ... in order: nbval refuses a stored output
without an execution count ("unrun reference cell has outputs"). Cell ids live in the
``.ipynb``; jupytext keeps them when it rewrites the pair, so a sync changes only the cells
that were edited.

    pagedlab notebook sync [NN ...]   strip noise and bring each pair in sync (newest side wins)
    pagedlab notebook run NN          re-execute NN with the solutions, store its checked outputs
    pagedlab notebook check [NN ...]  report pairs out of sync or unclean (what the test runs)
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from .loader import ROOT

NOTEBOOKS = ROOT / "notebooks"
CHECK = "# NBVAL_CHECK_OUTPUT"
FORMATS = "ipynb,py:percent"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
METADATA = {"jupytext": {"formats": FORMATS}, "kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
# Cell metadata an author may set on purpose (jupytext writes it on the `# %%` line).
CELL_METADATA = {"tags"}


def notebook_paths(keys: list[str] | None = None) -> list[Path]:
    """The .ipynb files for keys such as '06' or '06_paged_kv_cache' (all when none given)."""
    # A new notebook may exist only as its .py source until its first sync.
    every = sorted({p.with_suffix(".ipynb") for p in NOTEBOOKS.glob("[0-9][0-9]*_*.py")}
                   | set(NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb")))
    if not keys:
        return every
    found = []
    for key in keys:
        stem = Path(key).stem
        match = [p for p in every if p.stem == stem or p.stem.split("_")[0] == stem]
        if len(match) != 1:
            names = ", ".join(p.stem.split("_")[0] for p in every)
            raise ValueError(f"no single notebook matches {key!r}; notebooks are {names}")
        found.append(match[0])
    return found


def is_checked(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(CHECK)


def clean(nb):
    """Strip everything but the cells and the checked outputs, in place; returns nb."""
    nb.metadata = copy.deepcopy(METADATA)
    counts = execution_counts(nb)
    for i, cell in enumerate(nb.cells):
        # JupyterLab leaves `"tags": []` after a tag is added and removed; the .py cannot hold it.
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in CELL_METADATA and v}
        if cell.cell_type != "code":
            continue
        cell.execution_count = counts[i]
        if not is_checked(cell):
            cell.outputs = []
        cell.outputs = clean_outputs(cell.outputs, counts[i])
    return nb


def execution_counts(nb) -> dict[int, int | None]:
    """Cell index -> the execution count it is committed with: 1, 2, ... for checked cells."""
    counts, n = {}, 0
    for i, cell in enumerate(nb.cells):
        if is_checked(cell):
            n += 1
        counts[i] = n if is_checked(cell) else None
    return counts


def problems(path: Path) -> list[str]:
    """Why the pair of `path` (.ipynb) is not as committed notebooks must be; [] when fine."""
    return sync_problems(path) + clean_problems(path)


def sync_problems(path: Path) -> list[str]:
    """A missing partner, or a .py and .ipynb that hold different cells (jupytext's comparison)."""
    import jupytext
    import nbformat
    from jupytext.compare import compare_notebooks

    name, text = path.name, path.with_suffix(".py")
    if not path.exists():
        return [f"{text.name} has no paired {name} (pagedlab notebook sync {path.stem[:2]})"]
    if not text.exists():
        return [f"{name} has no paired source {text.name} (pagedlab notebook sync {path.stem[:2]})"]
    nb = nbformat.read(path, as_version=4)
    if nb.metadata.get("jupytext", {}).get("formats") != FORMATS:
        return [f"{name}: metadata jupytext.formats is not {FORMATS!r} (pagedlab notebook sync {path.stem[:2]})"]
    try:
        compare_notebooks(jupytext.read(text), nb, fmt="py:percent", allow_expected_differences=False)
    except Exception as exc:  # jupytext raises NotebookDifference (or AssertionError)
        return [f"{name} and {text.name} differ (edit one, then pagedlab notebook sync "
                f"{path.stem[:2]}):\n{exc}"]
    return []


def clean_problems(path: Path) -> list[str]:
    """What a kernel or an editor left in the .ipynb beyond the cells and the checked outputs."""
    import nbformat

    name = path.name
    if not path.exists():
        return []
    found = []
    nb = nbformat.read(path, as_version=4)
    hint = f"(pagedlab notebook sync {path.stem[:2]} strips it)"
    for key in sorted(set(nb.metadata) | set(METADATA)):
        if nb.metadata.get(key) != METADATA.get(key):
            found.append(f"{name}: notebook metadata {key} is {nb.metadata.get(key)!r}, "
                         f"expected {METADATA.get(key)!r} {hint}")
    counts = execution_counts(nb)
    for i, cell in enumerate(nb.cells):
        where = f"{name} cell {i} (id {cell.get('id')})"
        extra = {k for k, v in cell.metadata.items() if k not in CELL_METADATA or not v}
        if extra:
            found.append(f"{where}: cell metadata {sorted(extra)} {hint}")
        if cell.cell_type != "code":
            continue
        if cell.execution_count != counts[i]:
            found.append(f"{where}: execution count {cell.execution_count}, expected {counts[i]} {hint}")
        if cell.outputs and not is_checked(cell):
            found.append(f"{where}: outputs in a cell nbval does not check {hint}")
        if is_checked(cell) and not cell.outputs:
            found.append(f"{where}: a {CHECK} cell without its output (pagedlab notebook run {path.stem[:2]})")
        if any(out.get("execution_count", counts[i]) != counts[i] for out in cell.outputs):
            found.append(f"{where}: an output's execution count is not {counts[i]} {hint}")
    ids = [c.get("id") for c in nb.cells]
    if len(set(ids)) != len(ids) or None in ids:
        found.append(f"{name}: cell ids missing or repeated")
    return found


def sync(path: Path) -> None:
    """Clean the .ipynb and bring the pair in sync; the side edited last wins.

    jupytext reads the inputs from the newest file and the outputs and cell ids from the .ipynb,
    so an unedited cell keeps its id and, if checked, its stored output.
    """
    import jupytext
    import nbformat
    from jupytext.cli import jupytext as jupytext_cli

    text = path.with_suffix(".py")
    if not path.exists():  # a new notebook written as text: create its .ipynb
        nbformat.write(clean(jupytext.read(text)), path)
        os.utime(text)  # the source stays the newer side
    elif not text.exists():  # an .ipynb not yet paired: write its source
        nb = clean(nbformat.read(path, as_version=4))
        nbformat.write(nb, path)
        jupytext.write(nb, text, fmt="py:percent")
    jupytext_cli(["--quiet", "--sync", str(path)])
    # Clean what the newer side (often a JupyterLab save after running cells) brought in, then
    # write both files again so their timestamps agree.
    nb = clean(nbformat.read(path, as_version=4))
    nbformat.write(nb, path)
    jupytext_cli(["--quiet", "--sync", str(path)])


def run(path: Path, impl: str = "solutions", timeout: int = 600) -> list[str]:
    """Execute `path` top to bottom in a fresh kernel with `impl`; store the checked outputs.

    Only the outputs of ``# NBVAL_CHECK_OUTPUT`` cells are kept, so the committed notebook
    changes only where a checked result changed. Returns the cells whose stored output
    changed, each named by its first line after the check marker (what an author can find). An error in any cell aborts before any output is stored.
    """
    import nbformat
    from nbclient import NotebookClient

    sync(path)  # run what the author last edited, in whichever file
    nb = nbformat.read(path, as_version=4)
    ran = copy.deepcopy(nb)
    NotebookClient(ran, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute(
        env={**os.environ, "PAGEDLAB_IMPL": impl})  # the kernel's environment
    changed = []
    for i, (cell, done) in enumerate(zip(nb.cells, ran.cells, strict=True)):
        if is_checked(cell):
            new = clean_outputs(done.outputs, cell.execution_count)
            if new != cell.outputs:
                changed.append(f"cell {i}: {first_line(cell)}")
            cell.outputs = new
    nbformat.write(clean(nb), path)
    sync(path)
    return changed


def first_line(cell) -> str:
    """The first line of a cell that says what it does (the check marker skipped)."""
    lines = [ln.strip() for ln in cell.source.splitlines()]
    said = [ln for ln in lines if ln and not ln.startswith(CHECK)]
    return (said[0] if said else "(empty cell)")[:80]


def clean_outputs(outputs, count=None):
    outputs = copy.deepcopy(outputs)
    for out in outputs:
        if "execution_count" in out:
            out.execution_count = count
        out.pop("transient", None)
    return outputs


def main(args) -> int:
    import sys

    import nbformat

    try:
        paths = notebook_paths(args.notebooks)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.action == "sync":
        for path in paths:
            sync(path)
            print(f"synced notebooks/{path.name} <-> {path.with_suffix('.py').name}")
        return 0
    if args.action == "check":
        found = [p for path in paths for p in problems(path)]
        for p in found:
            print(p)
        print(f"{len(paths)} notebooks, {len(found)} problems")
        return 1 if found else 0
    if args.action == "run":
        if len(paths) != 1 or not args.notebooks:
            print("error: name one notebook, e.g. `pagedlab notebook run 06`", file=sys.stderr)
            return 2
        path = paths[0]
        print(f"running notebooks/{path.name} with PAGEDLAB_IMPL={args.impl} in a fresh kernel ...")
        try:
            changed = run(path, impl=args.impl)
        except Exception as exc:  # nbclient's CellExecutionError carries the traceback text
            print(f"error: {path.name} did not run to the end; no output stored.\n{exc}", file=sys.stderr)
            return 1
        checked = sum(is_checked(c) for c in nbformat.read(path, as_version=4).cells)
        print(f"{checked} checked cells; stored output changed in {len(changed)}"
              + "".join(f"\n  {c}" for c in changed) + "\npair synced")
        return 0
    raise AssertionError(args.action)
