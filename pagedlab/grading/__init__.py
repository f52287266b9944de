"""The autograder's package before the 2026-12 layout, kept for one release: it is now
`pagedlab.grader` (the pipeline, the judge, the command line, reports, classes) and
`pagedlab.spec.points` (what each task is worth)."""

from __future__ import annotations

from .._moved import warn_moved

warn_moved(__name__, "pagedlab.grader")


def grade(*args, **kwargs):
    """`pagedlab.grader.cli.grade`."""
    from ..grader.cli import grade as _grade

    return _grade(*args, **kwargs)


def __getattr__(name: str):
    if name in ("TABLE", "MAX_SCORE"):
        from ..spec import points

        return getattr(points, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
