"""`pagedlab release OUT`: write the student edition of the course.

This repository is the instructor edition: solutions/, hidden checks (grading/hidden/), the
answer models (pagedlab/grader/answers/), the mutation suites and the tools that build notebooks
live next to the student files. A student gets a copy without any of them. The copy is assembled from an allowlist of what a student needs
(never by deleting from a full copy), so a file added to the instructor edition stays out until
someone decides it belongs. Exercise files are generated from solutions/ on the spot, as
`pagedlab assign` would, so an instructor's local edits to exercises/ never ship.

Before the release is declared done, every released file is scanned for the lines of every fenced
solution region; one found means the release failed and the folder is removed, so a leaking
edition cannot be published by accident.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import assign
from .loader import ROOT

MARKER = ".pagedlab-course"
CHECKED_OUTPUT = "NBVAL_CHECK_OUTPUT"      # nbval compares these cells' outputs: they ship
CHECKED_TAG = "nbval-check-output"
# Notebook cells for instructors only (live demos of the grader, notes on the solutions): tagged
# in the source (`# %% [markdown] tags=["instructor"]`), left out of the student edition.
INSTRUCTOR_TAG = "instructor"
_PERCENT_CELL = re.compile(r"^# %%")
TOP_LEVEL = ("course", "environment.yml", "environment-gpu.yml", "pyproject.toml", "constraints.txt",
             "requirements.lock", ".gitignore")
_COURSE_TOOL = re.compile(r"\btools/[\w./-]+\.py\b")  # set-up helpers the `course` script runs
INSTRUCTOR_DOCS = ("README.md",)            # pagedlab/drivers/README.md, notebooks/README.md
# This module quotes solution lines (the lists below) and is useless without solutions/.
INSTRUCTOR_MODULES = INSTRUCTOR_DOCS + ("release.py",)
# Folders of pagedlab/ left out whole: the answer models (a buddy allocator, a swap model, a prefix
# cache) answer Tasks 11-13, so the student edition must not be able to import them.
INSTRUCTOR_PACKAGES = ("grader/answers", "harness/answers")
# The models in there, by file: their code lines are searched for in every released file, as the
# solution regions' lines are.
ANSWER_MODELS = {"buddy.py": ("Buddy",), "swap.py": ("expected_move",), "prefix_cache.py": ("ReferenceCache",)}
# Lines of a model that shipped code has for its own reasons (generic loops over a block table).
SHARED_MODEL_LINES = {
    "for logical, block in s.mapping:": "drivers.memory_manager walks a block table the same way",
    "if self.ref[b] == 0:": "sharing.py's fork/beam block manager counts references too",
    "table.append(self._new_block())": "sharing.py's block manager grows a table the same way",
}
SKIP_PARTS = ("__pycache__", ".ipynb_checkpoints", ".pytest_cache")
STUDENT_TESTS = Path("tests") / "student"   # shipped as the student edition's tests/

# Lines of solution regions that the shipped harness and demos must contain too: a shared idiom of
# the course's API, not a piece of a solution. Each is allowed anywhere.
SHARED_IDIOMS = {
    "cmem.free(seq)": "notebook 05's deliberately leaky destroy",
    "cmem.free(engine)": "notebooks 04-05",
    "cmem.free(engine.ref_count)": "notebooks 04-05",
    "if engine is None:": "argument checks in the harness and viz",
    "if block is None:": "cmem",
    "if block != -1:": "viz draws mapped L2 entries",
    "return block": "cmem and notebook 02's worked translation",
    "shared = block": "viz",
    "refs[block] = 1": "notebook 05's first-fit picture",
    "l1, l2 = divmod(logical, L2_PT_SIZE)": "notebook 02 teaches address translation with it",
    "destroy_sequence(engine, seq)": "the stub's signature in notebook 02's table of stubs",
}
# Known findings waiting for a fix on another branch: (released path, line) -> why it is tolerated.
# Remove an entry once its fix is merged; the leak test xfails exactly these.
PENDING: dict = {}  # (file, line) -> why a known leak is tolerated for now; empty: none is
_BEGIN = re.compile(r"^\s*(?:###|//)\s*BEGIN SOLUTION\b")
_END = re.compile(r"^\s*(?:###|//)\s*END SOLUTION\b")


class ReleaseError(ValueError):
    """The student edition cannot be written (bad OUT, or a solution line would ship)."""


@dataclass
class Report:
    out: Path
    files: list[Path] = field(default_factory=list)   # relative to out
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum((self.out / f).stat().st_size for f in self.files)

    def summary(self) -> str:
        lines = [f"wrote the student edition to {self.out} ({len(self.files)} files, "
                 f"{self.size / 1e6:.1f} MB): no solutions/, no hidden checks, no instructor tools;"
                 " no line of a solution region in any file",
                 f"next: cd {self.out} && git init && git add -A && git commit -m 'course' "
                 "(then push it as the class's template repository)"]
        return "\n".join(self.notes + lines)


# ---- what a solution region is -------------------------------------------------------------


def _bounded(line: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(line) + r"(?![\w])")


def fenced_lines(solutions: Path) -> dict[str, str]:
    """{stripped line: solution file} for every non-trivial line inside a fenced region.

    Skipped: blank lines, comments, lines under 12 characters, and lines that also occur outside
    the fences of the same solution file (signatures, given code). The generated exercise is not
    consulted: if generation ever let a fenced line through, that is exactly what must be caught.
    """
    found = {}
    for path in sorted(p for p in solutions.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        try:  # every text file: a fenced .c file must count even before assign learns .c
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        inside, fenced, outside = False, [], []
        for line in text.splitlines():
            if _BEGIN.match(line):
                inside = True
            elif _END.match(line):
                inside = False
            else:
                (fenced if inside else outside).append(line)
        given = "\n".join(outside)
        for line in fenced:
            s = line.strip()
            if len(s) < 12 or s.startswith(("#", "//", "/*", "*")):
                continue
            if not _bounded(s).search(given):
                found.setdefault(s, path.name)
    return found


def model_lines(folder: Path) -> dict[str, str]:
    """{stripped line: model file} for the code of every answer model in `folder`: the statements
    of its functions and methods (docstrings, comments and lines under 20 characters skipped)."""
    import ast

    found = {}
    for name, defined in ANSWER_MODELS.items():
        path = folder / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        source = text.splitlines()
        for top in ast.parse(text).body:
            if getattr(top, "name", None) not in defined:
                continue
            for node in ast.walk(top):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                body = node.body[1:] if ast.get_docstring(node) is not None else node.body
                for statement in body:
                    for line in source[statement.lineno - 1:statement.end_lineno]:
                        s = line.strip()
                        if len(s) >= 20 and not s.startswith("#"):
                            found.setdefault(s, name)
    return found


def searchable_text(path: Path) -> str | None:
    """A released file as text to search (notebooks: sources and outputs decoded); None if binary."""
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None
    if path.suffix != ".ipynb":
        return raw
    parts = [raw]
    for cell in json.loads(raw).get("cells", []):
        parts.append(_join(cell.get("source", "")))
        for output in cell.get("outputs", []):
            parts.append(_join(output.get("text", "")))
            parts += [_join(v) for v in output.get("data", {}).values() if isinstance(v, (str, list))]
            parts += [str(t) for t in output.get("traceback", [])]
    return "\n".join(parts)


def _join(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def find_leaks(out: Path, lines: dict[str, str], *, allowed=SHARED_IDIOMS) -> list[tuple[str, str]]:
    """(released path, solution line) for each fenced line found in a released file."""
    patterns = [(line, _bounded(line)) for line in lines if line not in allowed]
    leaks = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and ".git" not in p.relative_to(out).parts):
        text = searchable_text(path)
        if text is None:
            continue
        rel = path.relative_to(out).as_posix()
        leaks += [(rel, line) for line, pattern in patterns if line in text and pattern.search(text)]
    return leaks


# ---- building the edition ------------------------------------------------------------------


def _instructor_only(cell: dict) -> bool:
    return INSTRUCTOR_TAG in cell.get("metadata", {}).get("tags", [])


def strip_percent_source(text: str) -> str:
    """A jupytext py:percent source without its instructor-tagged cells (what strip_notebook
    drops from the .ipynb, so the released pair still agrees)."""
    kept, keep = [], True
    for line in text.splitlines(keepends=True):
        if _PERCENT_CELL.match(line):
            keep = not re.search(rf"tags=\[[^\]]*[\"']{INSTRUCTOR_TAG}[\"']", line)
        if keep:
            kept.append(line)
    return "".join(kept).rstrip("\n") + "\n"


def strip_notebook(nb: dict) -> dict:
    """Outputs and execution counts removed, except the cells nbval checks (they must match);
    instructor-only cells removed."""
    nb = json.loads(json.dumps(nb))
    nb["cells"] = [cell for cell in nb.get("cells", []) if not _instructor_only(cell)]
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.setdefault("metadata", {})
        checked = CHECKED_OUTPUT in _join(cell.get("source", "")) or CHECKED_TAG in meta.get("tags", [])
        if not checked:
            cell["outputs"] = []
            cell["execution_count"] = None
        meta.pop("execution", None)
    nb.get("metadata", {}).pop("widgets", None)
    return nb


def _copy_tree(src: Path, dst: Path, report: Report, out: Path, skip_names=(), skip_dirs=()) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if (not path.is_file() or any(p in SKIP_PARTS or p.startswith(".") for p in rel.parts)
                or path.name in skip_names or path.suffix in (".pyc", ".so", ".o")
                or any(rel.as_posix().startswith(d + "/") for d in skip_dirs)):
            continue
        _put(dst / rel, path.read_bytes(), report, out, mode=path.stat().st_mode)


def _put(target: Path, data: bytes | str, report: Report, out: Path, mode: int | None = None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    target.write_bytes(data)
    if mode is not None and mode & stat.S_IXUSR:
        target.chmod(0o755)
    report.files.append(target.relative_to(out))


def _prepare(out: Path, force: bool, stubs: dict[str, str]) -> Path | None:
    """Make `out` ready to write; returns where edited exercises found there were saved."""
    if out.exists() and not out.is_dir():
        raise ReleaseError(f"{out} exists and is not a folder")
    contents = [p for p in out.iterdir() if p.name != ".git"] if out.is_dir() else []
    if not contents:
        out.mkdir(parents=True, exist_ok=True)
        return None
    marker = out / MARKER
    previous = marker.is_file() and re.search(r'^edition\s*=\s*"student"', marker.read_text(), re.M)
    if not previous:
        raise ReleaseError(f"{out} is not empty and is not a student edition written by "
                           "`pagedlab release`; choose a new or empty folder (nothing was changed)")
    if not force:
        raise ReleaseError(f"{out} holds an earlier student edition; pass --force to replace it "
                           "(its .git folder is kept, so you can commit the new release on top)")
    saved = _save_edited_exercises(out, stubs)
    for path in contents:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return saved


def _save_edited_exercises(out: Path, stubs: dict[str, str]) -> Path | None:
    """Before --force replaces an edition: exercises that are not the stubs may be someone's work.

    They are copied next to OUT (not into it: a student's correct code must not ship, and would
    trip the leak scan), and the copy's path is reported.
    """
    folder = out / "exercises"
    if not folder.is_dir():
        return None
    changed = [p for p in folder.rglob("*") if p.is_file()
               and stubs.get(p.relative_to(folder).as_posix()) != p.read_bytes().decode("utf-8", "replace")]
    if not changed:
        return None
    backup = out.parent / f"{out.name}-exercises-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    n = 1
    while backup.exists():
        n += 1
        backup = out.parent / f"{out.name}-exercises-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{n}"
    shutil.copytree(folder, backup)
    return backup


def build(out: str | Path, *, source: Path = ROOT, force: bool = False) -> Report:
    """Write the student edition of the course at `source` into `out`."""
    source, out = Path(source).resolve(), Path(out).resolve()
    solutions = source / "solutions"
    if not solutions.is_dir():
        raise ReleaseError(f"{source} has no solutions/: releases are made from the instructor edition")
    if out == source or out in source.parents or (source in out.parents and (source / "build") not in out.parents):
        raise ReleaseError(f"write the student edition outside the course folder (or under its build/), not {out}")
    try:
        exercises = assign.plan(solutions, source / "exercises")
    except assign.AssignError as exc:
        raise ReleaseError(f"solutions/ cannot be turned into exercises: {exc}") from exc
    saved = _prepare(out, force, {p.relative_to(source / "exercises").as_posix(): text
                                  for p, text in exercises.items()})
    report = Report(out)
    if saved is not None:
        report.notes.append(f"saved the exercises/ found in {out} (not the stubs: someone's work?) "
                            f"to {saved}/ before replacing them")
    try:
        _write(source, out, exercises, report)
        lines = fenced_lines(solutions)
        leaks = [(f, line) for f, line in find_leaks(out, lines) if (f, line) not in PENDING]
        models = source / "pagedlab" / INSTRUCTOR_PACKAGES[0]
        model_code = model_lines(models)
        leaks += [(f, line) for f, line in find_leaks(out, model_code, allowed=SHARED_MODEL_LINES)]
    except BaseException:
        _discard(out)
        raise
    if leaks:
        _discard(out)
        shown = "\n".join(f"  {f}: {line}   (from "
                          f"{f'solutions/{lines[line]}' if line in lines else f'{models.name}/{model_code[line]}'})"
                          for f, line in leaks[:20])
        raise ReleaseError(f"{len(leaks)} line(s) of fenced solution regions or answer models would ship; "
                           f"nothing was released:\n{shown}")
    if source == ROOT.resolve():
        from .grader import golden

        if golden.stale():  # the edition's notebooks judge public checks against these records
            report.notes.append("warning: pagedlab/grader/expected.json is older than solutions/ or "
                                "the checks it records; regenerate it (pagedlab.grader.golden.write()) "
                                "and release again before publishing")
    edited = [p for p, text in exercises.items() if p.is_file() and p.read_text(encoding="utf-8") != text]
    if edited:
        report.notes.append("note: released the exercises as solutions/ generates them; your local "
                            f"exercises/ differs in {', '.join(p.name for p in edited)}")
    return report


def _discard(out: Path) -> None:
    for path in out.iterdir():
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _write(source: Path, out: Path, exercises: dict[Path, str], report: Report) -> None:
    for path, text in sorted(exercises.items()):
        _put(out / "exercises" / path.relative_to(source / "exercises"), text, report, out)
    _copy_tree(source / "pagedlab", out / "pagedlab", report, out, skip_names=INSTRUCTOR_MODULES,
               skip_dirs=INSTRUCTOR_PACKAGES)
    notebooks = source / "notebooks"
    for path in sorted(notebooks.rglob("*")):
        rel = path.relative_to(notebooks)
        if not path.is_file() or any(p in SKIP_PARTS or p.startswith(".") for p in rel.parts):
            continue
        if path.name in INSTRUCTOR_DOCS:
            continue
        if path.suffix == ".ipynb":
            nb = strip_notebook(json.loads(path.read_text(encoding="utf-8")))
            _put(out / "notebooks" / rel, json.dumps(nb, indent=1, ensure_ascii=False) + "\n", report, out)
    for path in sorted(notebooks.rglob("*")):  # jupytext sources after their .ipynb: never older
        rel = path.relative_to(notebooks)
        if (path.is_file() and path.suffix != ".ipynb" and path.name not in INSTRUCTOR_DOCS
                and not any(p in SKIP_PARTS or p.startswith(".") for p in rel.parts)):
            data = path.read_bytes()
            if path.suffix == ".py" and path.with_suffix(".ipynb").is_file():
                data = strip_percent_source(data.decode("utf-8"))
            _put(out / "notebooks" / rel, data, report, out)
    _copy_tree(source / STUDENT_TESTS, out / "tests", report, out)
    course = source / "course"
    for name in sorted(set(_COURSE_TOOL.findall(course.read_text()))) if course.is_file() else []:
        if (source / name).is_file():  # tools/ stays behind, except what `./course` itself needs
            _put(out / name, (source / name).read_bytes(), report, out, mode=(source / name).stat().st_mode)
    for name in TOP_LEVEL:
        if (source / name).is_file():
            _put(out / name, (source / name).read_bytes(), report, out, mode=(source / name).stat().st_mode)
    _put(out / MARKER, _marker(), report, out)
    _put(out / "README.md", student_readme(source), report, out)
    _put(out / ".ci" / "run", CI_RUN, report, out, mode=0o755)
    _put(out / ".github" / "workflows" / "test.yml", WORKFLOW, report, out)


def _marker() -> str:
    return ('# pagedlab course folder marker. The student edition, written by `pagedlab release`:\n'
            '# no solutions/, no hidden checks.\nedition = "student"\n')


CI_RUN = """#!/usr/bin/env bash
# CI for the student edition (GitHub Classroom, any runner with Python >= 3.10 and g++ >= 12):
# the README's test command on a clean checkout. It checks the set-up and prints the grade of
# exercises/ as a report; unfinished tasks score 0 without failing the run.
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./course test
"""

WORKFLOW = """name: course tests
on: [push, pull_request, workflow_dispatch]
jobs:
  test:
    runs-on: ubuntu-latest
    timeout-minutes: 30
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - run: .ci/run
"""


def _section(readme: str, title: str) -> str:
    """The `## title` section of the instructor README (heading included), or ''."""
    found = re.search(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", readme, re.M | re.S)
    return found.group(0).rstrip() + "\n\n" if found else ""


def student_readme(source: Path = ROOT) -> str:
    instructor = (source / "README.md").read_text(encoding="utf-8") if (source / "README.md").is_file() else ""
    title = instructor.splitlines()[0] if instructor.startswith("# ") else "# pagedlab"
    return f"""{title}

Your copy of the pagedlab course: notebooks that explain vLLM's PagedAttention from the page
table to the CUDA kernel, and the files in `exercises/` where you write the graded code. No GPU
is needed for any of it.

## Two commands

```bash
./course open    # JupyterLab on notebooks/, opening 00_welcome
./course test    # checks your set-up, then grades your exercises/ (what CI runs)
```

Both create `./.venv` on first use (Python >= 3.10 and a C++20 compiler such as g++ >= 12 or
clang) and install pagedlab with everything the course needs, at the versions in
`requirements.lock` (hash-checked; on a Python or platform the lock was not made for, from
`pyproject.toml` within `constraints.txt`). The install uses uv and prints a line per step: on
a 2-core machine with a fast connection the first `./course open` is ready in about a minute (40 s
measured with an empty package cache; 81 s on a busy machine), and a slow connection adds the
download of a few hundred MB. Without uv, pip does it in a few minutes. Later runs start at once.
`.venv/bin/pagedlab doctor` says what is missing. Conda users: `environment.yml`.

`./course test` passes as long as the course is set up and every file in `exercises/` loads; the
grade it prints after that is a report (untouched exercises score 0), not a pass/fail gate.

No set-up at all: open the course on Binder (replace ORG/REPO with this repository's):
`https://mybinder.org/v2/gh/ORG/REPO/HEAD?urlpath=lab/tree/notebooks/00_welcome.ipynb` (work
there is lost when the session ends: download your `exercises/`). On Colab, run
`!pip install "pagedlab[dev] @ git+https://github.com/ORG/REPO"` and clone this repository in
the first cell, then `%cd` into it; the notebooks find your `exercises/` from there.

{_section(instructor, "Course map")}## Working on the tasks

- Write your code in `exercises/` where it says `# YOUR CODE HERE`; the notebooks load it with
  `pagedlab.load("memory_manager")`, fresh on every call, so re-running a cell picks up edits.
- A graded cell (`pagedlab.graded.run("task2")`) prints one ✓/✗ line per check, and under every
  ✗ the rule (with the notebook section that explains it), what was expected and what your code
  did. Your code runs in a separate process: an endless loop or a segfault fails the check and
  names your line; the notebook keeps working.
- **Part A in Python or in C.** Finish `exercises/memory_manager.py` (notebooks 02–05) or
  `exercises/llm_memory.c` (notebook 02c) and leave the other as it came. Every grade takes
  Part A from the file that is not the untouched stub (whitespace and comments are not edits) and
  says which, and why, on its first lines; the notebooks run that file too. Edited both? Python is
  graded unless you choose: write `c` (or `python`) in `exercises/track.txt` and submit it with
  your files, or run `.venv/bin/pagedlab grade --track c`.
- `.venv/bin/pagedlab grade --impl exercises` grades everything as the grader will. Your
  instructor's grader also runs hidden checks (other seeds, sizes and edge cases of the same
  rules); they are not part of this copy, so code that is right, not tuned to the visible checks,
  is what passes them.
- `.venv/bin/pagedlab grade --impl exercises --notebooks` also runs every notebook top to bottom
  on your files, as the grader does when your instructor turns notebooks on (Gradescope's
  `GRADE_NOTEBOOKS=1`). Each notebook is reported, worth no points; one that fails names its first
  failing cell (its number among the code cells and its first line) and the last line of the
  error. With `--tasks 9,12` it grades those tasks and runs only the notebooks that teach them.
- Nothing in this copy overwrites your files in `exercises/`. Commit and push your work often.
- Submit the files you edited in `exercises/`, as your instructor asks (Gradescope upload or
  this repository).

{_section(instructor, "GPU notes")}"""
