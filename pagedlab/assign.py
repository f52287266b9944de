"""Generate the student files in exercises/ from the reference files in solutions/.

solutions/ is the only implementation anyone edits by hand. A fenced region

    ### BEGIN SOLUTION Task 2: create_sequence        (Python)
    // BEGIN SOLUTION Task 7: softmax                   (CUDA)

ends at the matching ``END SOLUTION`` line and becomes a prompt plus a stub that fails loudly
(Python: ``raise NotImplementedError``) or leaves the kernel's output unwritten (CUDA:
``return;``). The label after ``SOLUTION`` names the task; without one the enclosing function's
name is used. ``| <statement>`` at the end of the BEGIN line replaces the default stub, e.g.
``// BEGIN SOLUTION Task 8: warp max | return -INFINITY;`` inside a helper that returns a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .course import root as course_root

FENCES = {  # suffix -> (comment prefix, default stub template)
    ".py": ("###", 'raise NotImplementedError("{label}")'),
    ".cu": ("//", "return;"),
    ".cuh": ("//", "return;"),
}
_DEF = re.compile(r"^\s*(?:def|class)\s+(\w+)|^\s*(?:__global__|__device__)[^()]*?\b(\w+)\s*\(")


class AssignError(ValueError):
    """A solution file whose fences cannot be turned into an exercise."""


@dataclass
class Region:
    begin: int  # 1-based line numbers
    end: int
    label: str


def _fence_re(prefix: str, word: str) -> re.Pattern:
    return re.compile(rf"^(\s*){re.escape(prefix)}\s*{word} SOLUTION\b(.*)$")


def make_exercise(text: str, filename: str) -> str:
    """Replace every fenced region of `text` (the contents of `filename`) by its stub."""
    suffix = Path(filename).suffix
    if suffix not in FENCES:
        return text
    prefix, default_stub = FENCES[suffix]
    begin_re, end_re = _fence_re(prefix, "BEGIN"), _fence_re(prefix, "END")
    out: list[str] = []
    open_at: int | None = None
    enclosing = "this part"
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        found = _DEF.match(line)
        if found and open_at is None:
            enclosing = found.group(1) or found.group(2)
        begin, end = begin_re.match(line), end_re.match(line)
        if begin:
            if open_at is not None:
                raise AssignError(f"{filename}:{number}: BEGIN SOLUTION inside the region opened at line {open_at} (fences cannot nest)")
            open_at = number
            indent, rest = begin.group(1), begin.group(2).strip()
            label, _, stub = (part.strip() for part in rest.partition("|"))
            label = label or enclosing
            stub = stub or default_stub.format(label=label.replace('"', "'"))
            out.append(f"{indent}{prefix[:2] if prefix == '//' else '#'} YOUR CODE HERE ({label})\n")
            if suffix != ".py" and not stub.startswith("//"):
                out.append(f"{indent}// Until this part is written the kernel leaves its output unwritten.\n")
            out.append(f"{indent}{stub}\n")
        elif end:
            if open_at is None:
                raise AssignError(f"{filename}:{number}: END SOLUTION without a BEGIN SOLUTION before it")
            open_at = None
        elif open_at is None:
            out.append(line)
    if open_at is not None:
        raise AssignError(f"{filename}:{open_at}: BEGIN SOLUTION is never closed by END SOLUTION")
    return "".join(out)


def _source_files(solutions: Path) -> list[Path]:
    return sorted(
        p for p in solutions.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")
    )


def plan(solutions: Path | None = None, exercises: Path | None = None) -> dict[Path, str]:
    """Map each exercise file to the text it should have."""
    solutions = solutions or course_root() / "solutions"
    exercises = exercises or course_root() / "exercises"
    wanted = {}
    for src in _source_files(solutions):
        rel = src.relative_to(solutions)
        wanted[exercises / rel] = make_exercise(src.read_text(), str(src.relative_to(solutions.parent)))
    return wanted


def stale(solutions: Path | None = None, exercises: Path | None = None) -> list[str]:
    """Exercise files that differ from what `assign` would write (missing, changed or extra)."""
    solutions = solutions or course_root() / "solutions"
    exercises = exercises or course_root() / "exercises"
    wanted = plan(solutions, exercises)
    problems = []
    for path, text in wanted.items():
        rel = path.relative_to(exercises.parent)
        if not path.exists():
            problems.append(f"{rel} (missing)")
        elif path.read_text() != text:
            problems.append(f"{rel} (differs from what solutions/ generates)")
    for path in _source_files(exercises) if exercises.is_dir() else []:
        if path not in wanted:
            problems.append(f"{path.relative_to(exercises.parent)} (not generated from solutions/)")
    return problems


def write(solutions: Path | None = None, exercises: Path | None = None) -> list[Path]:
    """Regenerate exercises/; returns the files whose text changed."""
    changed = []
    for path, text in plan(solutions, exercises).items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    return changed
