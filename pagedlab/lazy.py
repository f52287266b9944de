"""A module imported on first use, for check modules the grader lists but never runs.

The grader imports every check module of a task to list its checks; only the child process
runs the drivers. A module held as `lazy_module("torch")` costs nothing until a driver (or an
expectation) touches one of its attributes, so a grader that only lists checks never pays
torch's import (seconds of CPU).
"""

from __future__ import annotations

import importlib


class LazyModule:
    """Stands for the module `name`; the first attribute read imports it."""

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> LazyModule:
    return LazyModule(name)
