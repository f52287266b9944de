"""Moved to `pagedlab.spec.points` (the 2026-12 layout); this path forwards there for one release."""

from pagedlab._moved import forward

forward(__name__, "pagedlab.spec.points")
