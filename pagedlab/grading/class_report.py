"""Moved to `pagedlab.grader.class_report` (the 2026-12 layout); this path forwards there for one release."""

from pagedlab._moved import forward

forward(__name__, "pagedlab.grader.class_report")
