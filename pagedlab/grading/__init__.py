"""The autograder behind `pagedlab grade`.

Every task of `points.TABLE` runs in its own process with a time limit (`runner`), so a
segfault, an infinite loop or an import error in the student's code fails that task and only
that task. `report` turns the outcomes into a score table and Gradescope's results.json.
Instructor documentation: grading/README.md at the repository root.
"""

from __future__ import annotations


def grade(*args, **kwargs):
    """`pagedlab.grading.cli.grade`: grade an implementation, return the results.json dict."""
    from .cli import grade as _grade

    return _grade(*args, **kwargs)


def __getattr__(name: str):
    # Imported lazily: each task process imports this package and should start fast.
    if name in ("TABLE", "MAX_SCORE"):
        from . import points

        return getattr(points, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["grade", "TABLE", "MAX_SCORE"]
