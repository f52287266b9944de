"""pytest plugin of a grader's notebook run (`pytest -p pagedlab.drivers.nbrecord --nbval-lax`):
which code cell began and which failed, with the last line of its error, as JSON lines on the
descriptor root opened for it (PAGEDLAB_RECORD_FD), so root can name the failing cell without
reading nbval's text output. Root trusts none of it: it caps, clips and escapes what it reads,
and takes each cell's text from its own copy of the notebook.
"""

from __future__ import annotations

import json
import os
import re

import pytest

RECORD_FD_ENV = "PAGEDLAB_RECORD_FD"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_out = None


def pytest_configure(config) -> None:
    global _out
    fd = os.environ.get(RECORD_FD_ENV, "")
    if fd.isdigit():
        os.set_inheritable(int(fd), False)  # not for the Jupyter kernel this process starts
        _out = os.fdopen(int(fd), "w", encoding="utf-8")


def _emit(**event) -> None:
    if _out is not None:
        _out.write(json.dumps(event) + "\n")
        _out.flush()


def _cell(item) -> int | None:
    number = getattr(item, "cell_num", None)
    return number + 1 if isinstance(number, int) else None


def pytest_runtest_setup(item) -> None:
    if _cell(item) is not None:
        _emit(event="begin", cell=_cell(item))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed and _cell(item) is not None:
        # split on newlines only: a carriage return in the error is its text (root escapes it)
        lines = [line.strip() for line in _ANSI.sub("", report.longreprtext or "").split("\n") if line.strip()]
        _emit(event="failed", cell=_cell(item), error=(lines[-1] if lines else "failed")[:2000])
