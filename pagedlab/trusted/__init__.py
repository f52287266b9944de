"""Moved to `pagedlab.grader.trusted` (the 2026-12 layout); this path forwards there for one release."""

from pagedlab._moved import warn_moved

warn_moved(__name__, "pagedlab.grader.trusted")
