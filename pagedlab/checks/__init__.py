"""The package the checks lived in before the 2026-12 layout, kept for one release.

What a check is now lives in `pagedlab.spec` (the manifest and the catalog), its drivers in
`pagedlab.drivers` (the check child's side) and the grader that plans, runs and judges them in
`pagedlab.grader`. The names this package had forward there; a student's notebook from before
the graded cells moved still calls `pagedlab.checks.run(...)`, which is `pagedlab.graded.run`.
"""

from __future__ import annotations

from .._moved import warn_moved
from ..drivers.record import drive, expect, expect_equal
from ..grader.registry import checks_of
from ..spec.catalog import Check, CheckFailure, check
from ..spec.manifest import TASKS

__all__ = ["TASKS", "Check", "CheckFailure", "check", "checks_of", "drive", "expect", "expect_equal"]

warn_moved(__name__, "pagedlab.spec, pagedlab.drivers and pagedlab.grader")

# Moved to `pagedlab.graded`; a student's notebook from before the move still calls them here.
_IN_GRADED = ("Result", "require", "results", "run")


def __getattr__(name: str):
    # Runs only when one of those names is read, after this package and its callers have loaded.
    if name in _IN_GRADED:
        from .. import graded

        return getattr(graded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
