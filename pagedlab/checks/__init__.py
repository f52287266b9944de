"""Graded checks: one registry serves the notebooks, pytest and `pagedlab grade`.

A check is a function ``fn(impl)`` that loads what it needs with ``pagedlab.load(name, impl)``
and raises `CheckFailure` saying which rule was broken, what was expected and what the
student's code did. Checks are grouped by task ("task1" ... ); `run` prints one line per check
and raises a short `CheckFailure` (no 40-line traceback in Jupyter), `results` returns plain
records for the grader.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Task id -> title. Numbering follows the course: HW3 Tasks 1-5, then Parts B-D.
TASKS: dict[str, str] = {
    "task1": "Task 1 · engine initialization (llm_init)",
    "task2": "Task 2 · sequence creation and deletion (create_sequence, free_sequence)",
    "task3": "Task 3 · fork with reference counts (fork_sequence)",
    "task4": "Task 4 · address translation, copy-on-write and append (append_kv)",
    "task5": "Task 5 · engine destruction, no leaks (llm_destroy)",
    "task6": "Task 6 · slot mapping",
    "task7": "Task 7 · writing K/V into the paged cache",
    "task8": "Task 8 · gathering a sequence's K/V through its block table",
    "task9": "Task 9 · paged attention in torch",
    "task10": "Task 10 · the CUDA paged-attention kernel",
    "task11": "Task 11 · prefix caching with an LRU free queue",
    "task12": "Task 12 · a buddy allocator (the contiguous baseline)",
    "task13": "Task 13 · swapping a sequence group to CPU memory, and copy_blocks",
    "task14": "Task 14 · the v2 split-K kernel for long contexts (paged_attention_v2)",
}

# Modules that register checks when imported (kept lazy: torch is slow to import).
CHECK_MODULES = {
    "task1": "hw3", "task2": "hw3", "task3": "hw3", "task4": "hw3", "task5": "hw3",
    "task6": "attention", "task7": "attention", "task8": "attention", "task9": "attention",
    "task10": "kernel",
    "task11": "prefix",
    "task12": "utilization",
    "task13": "swap",
    "task14": "paged_attention_v2",
}


class CheckFailure(AssertionError):
    """A graded check failed: which rule, what was expected, what happened."""

    def __init__(self, what: str, *, rule: str = "", expected=None, actual=None, hint: str = ""):
        self.what, self.rule, self.expected, self.actual, self.hint = what, rule, expected, actual, hint
        super().__init__(self.report())

    def report(self) -> str:
        lines = [self.what]
        if self.rule:
            lines.append(f"  rule:     {self.rule}")
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.actual is not None:
            lines.append(f"  yours:    {self.actual}")
        if self.hint:
            lines.append(f"  hint:     {self.hint}")
        return "\n".join(lines)


def expect(condition: bool, what: str, **details) -> None:
    """Raise `CheckFailure(what, **details)` unless `condition` holds."""
    if not condition:
        raise CheckFailure(what, **details)


def expect_equal(actual, expected, what: str, *, rule: str = "", hint: str = "") -> None:
    if actual != expected:
        raise CheckFailure(what, rule=rule, expected=expected, actual=actual, hint=hint)


@dataclass
class Check:
    task: str
    name: str
    fn: Callable
    rule: str = ""


@dataclass
class Result:
    task: str
    name: str
    passed: bool
    message: str = ""


_REGISTRY: dict[str, list[Check]] = {}
_loaded: set[str] = set()


def check(task: str, name: str, rule: str = ""):
    """Register ``fn(impl)`` as a graded check of `task`."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")

    def register(fn):
        _REGISTRY.setdefault(task, []).append(Check(task, name, fn, rule))
        return fn

    return register


def checks_of(task: str) -> list[Check]:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    module = CHECK_MODULES[task]
    if module not in _loaded:
        importlib.import_module(f"{__name__}.{module}")
        _loaded.add(module)
    return list(_REGISTRY.get(task, []))


def _explain(exc: BaseException) -> str:
    if isinstance(exc, CheckFailure):
        return exc.report()
    if isinstance(exc, NotImplementedError):
        return f"not implemented yet: {exc or 'the stub still raises NotImplementedError'}"
    # An unexpected exception in the student's code: show where, in a few lines.
    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f for f in reversed(frames) if _is_student_file(f.filename)), frames[-1] if frames else None)
    at = f" at {where.filename}:{where.lineno} ({where.name}): {where.line}" if where else ""
    return f"your code raised {type(exc).__name__}: {exc}{at}"


_LIBRARY_DIRS = tuple(str(Path(p).resolve()) for p in {Path(__file__).parent.parent, sys.prefix, sys.base_prefix})


def _is_student_file(filename: str) -> bool:
    """Student code is whatever runs outside pagedlab and the Python installation."""
    path = str(Path(filename).resolve()) if not filename.startswith("<") else filename
    return not filename.startswith("<") and not path.startswith(_LIBRARY_DIRS)


def run_one(c: Check, impl=None) -> Result:
    """Run one check; a student's bug (even `sys.exit()`) becomes a failed Result, never a raise."""
    try:
        c.fn(impl)
    except Exception as exc:  # noqa: BLE001 - any failure of student code is a failed check
        return Result(c.task, c.name, False, _explain(exc))
    except SystemExit as exc:  # sys.exit() in student code must not end the caller silently
        return Result(c.task, c.name, False, f"your code called sys.exit({exc.code!r})")
    return Result(c.task, c.name, True)


def results(task: str, impl=None) -> list[Result]:
    """Run every check of `task` against `impl`; never raises for a student's bug."""
    return [run_one(c, impl) for c in checks_of(task)]


def run(task: str, impl=None, *, quiet: bool = False) -> None:
    """Notebook entry: print ✓/✗ per check and raise a short `CheckFailure` if any failed.

    Returns nothing, so a graded cell shows only the check lines (use `results` for records).
    """
    _short_tracebacks_in_ipython()
    res = results(task, impl)
    if not quiet:
        print(TASKS[task])
        for r in res:
            print(f"  {'✓' if r.passed else '✗'} {r.name}")
    failed = [r for r in res if not r.passed]
    if failed:
        first = failed[0]
        raise CheckFailure(
            f"{len(failed)} of {len(res)} checks failed for {TASKS[task]}. First: {first.name}\n{first.message}"
        )
    if not quiet:
        print(f"All {len(res)} checks passed.")


_installed = False


def _short_tracebacks_in_ipython() -> None:
    """Show a CheckFailure in Jupyter as its message only; nbval still sees the error."""
    global _installed
    if _installed:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def handler(self, etype, value, tb, tb_offset=None):
        self._showtraceback(etype, value, [f"{etype.__name__}: {value}"])

    shell.set_custom_exc((CheckFailure,), handler)
    _installed = True
