"""Graded checks: one registry serves the notebooks, pytest and `pagedlab grade`.

A check is a *driver* ``fn(run)`` (see `framework`): it loads the student's module with
``run.load(name)``, calls it and records what it saw with `expect` / `expect_equal` /
``run.see``. Drivers run in a child process; the *judge* (`judge`) compares the record with the
trusted one in the process that asked. The notebooks' graded cells run them through
`pagedlab.graded`, which sits above this package and `pagedlab.sandbox` (the child process).
Which checks exist, and what each task is worth, comes from the task manifest (`tasks.toml`).
"""

from __future__ import annotations

from ..manifest import TASKS
from .framework import Check, CheckFailure, check, checks_of, drive, expect, expect_equal

__all__ = ["TASKS", "Check", "CheckFailure", "check", "checks_of", "drive", "expect", "expect_equal"]

# Moved to `pagedlab.graded`; a student's notebook from before the move still calls them here.
_IN_GRADED = ("Result", "require", "results", "run")


def __getattr__(name: str):
    # Runs only when one of those names is read, after this package and its callers have loaded,
    # so the graded module above stays above: importing `pagedlab.checks` never loads it.
    if name in _IN_GRADED:
        from .. import graded

        return getattr(graded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
