"""One line of `pagedlab doctor`'s table: a piece, its status, what was found, what to do.

Its own module so that the probes living elsewhere (the C track's, in cnative) build rows
without importing the doctor that gathers them.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, MISSING, OPTIONAL = "ok", "MISSING", "optional"


@dataclass
class Row:
    piece: str
    status: str
    found: str
    todo: str = ""
