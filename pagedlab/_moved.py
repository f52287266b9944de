"""The old import paths of the modules that moved when the process boundary became the package
boundary (spec / drivers / grader / sandbox / engine, December 2026).

An old module path hands back the module at its new place, the very same object, so a notebook
or a tool written against the old path keeps working and shares its state; it says so once with
a DeprecationWarning. These paths go in the next release.
"""

from __future__ import annotations

import importlib
import sys
import warnings


def warn_moved(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release of pagedlab",
                  DeprecationWarning, stacklevel=3)


def forward(old: str, new: str) -> None:
    """Run as the old module's body: from here on, `old` names the module `new`."""
    warn_moved(old, new)
    sys.modules[old] = importlib.import_module(new)
