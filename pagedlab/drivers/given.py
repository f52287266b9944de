"""What `expected.json` says that the checks themselves need: which functions of a course file
are given (not written by the student), read from the file or, without it, from solutions/.

A check child reads neither: both are the grader's, root-only in the grading set-up, and the
student API refuses to open the grader's folder. The grader sends the names with its plan
(`pagedlab.grader.pipeline`), and the child hands them to `use` before any check runs.

It sits below both the driver record (which names the student's frames in a traceback) and
`golden` (which writes the file), so neither imports the other to reach it.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from ..spec import manifest

PATH = Path(__file__).parent.parent / "grader" / "expected.json"
VERSION = 1
_DEF = re.compile(r"^(\s*)def\s+(\w+)\s*\(")
_FENCE = re.compile(r"^\s*(###|//)\s*BEGIN SOLUTION\b")


def _solutions_dir() -> Path:
    from ..loader import impl_dir

    return impl_dir("solutions")


def fenced_functions(text: str) -> set[str]:
    """Names of the Python functions that contain a solution fence (the ones students write)."""
    names, stack = set(), []
    for line in text.splitlines():
        found = _DEF.match(line)
        if found:
            indent = len(found.group(1))
            stack = [(i, n) for i, n in stack if i < indent] + [(indent, found.group(2))]
        elif _FENCE.match(line) and stack:
            names.add(stack[-1][1])
    return names


def _given(solutions: Path) -> dict[str, list[str]]:
    given = {}
    for name in manifest.SUBMISSION_FILES:
        path = solutions / name
        if path.suffix == ".py" and path.is_file():
            text = path.read_text()
            every = {m.group(2) for m in map(_DEF.match, text.splitlines()) if m}
            given[name] = sorted(every - fenced_functions(text))
    return given


@lru_cache(maxsize=1)
def load(path: Path = PATH) -> dict:
    if not path.is_file():
        return {"version": VERSION, "fingerprint": "", "given": {}, "records": {}}
    return json.loads(path.read_text(encoding="utf-8"))


_from_plan: dict[str, list[str]] | None = None


def use(names: dict) -> None:
    """In a check child: the given functions as the grader's plan sent them (file -> names)."""
    global _from_plan
    _from_plan = {str(file): [str(n) for n in found] for file, found in dict(names).items()
                  if isinstance(found, list)}


def given_functions() -> dict[str, list[str]]:
    if _from_plan is not None:
        return _from_plan
    data = load().get("given") or {}
    if data:
        return data
    try:
        return _given(_solutions_dir())
    except (FileNotFoundError, OSError):
        return {}
