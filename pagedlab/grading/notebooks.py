"""`pagedlab grade --notebooks`: run each course notebook top to bottom under nbval.

Each notebook runs in its own pytest process with PAGEDLAB_IMPL pointing at the submission, so
its graded cells exercise the student's code. Notebooks are reported, not scored (0 points): the
same checks are already scored task by task, and a notebook failing on a plotting cell should
not cost points. An instructor who wants points sets NOTEBOOK_POINTS in points.py.

Under a sandbox user the run is sealed like a check child (`run_limited(..., loopback=True)`):
PID and mount namespaces, private temporary folders, cgroups, and every Python process of it
(pytest, the Jupyter kernel, what the notebook starts) non-dumpable under a seccomp filter; its
Internet sockets stay in a network namespace where only the loopback is up.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import course
from ..sandbox.process import run_limited
from ..sandbox.runner import PACKAGE_PARENT
from .points import memory_limit, time_scale

NOTEBOOK_POINTS = 0.0
NOTEBOOK_TIME_LIMIT = 300.0  # seconds per notebook
_NUMBERED = re.compile(r"^\d\d_.*\.ipynb$")
# A lettered notebook belongs to an optional track and runs when the submission has that track's
# file: 02c (HW3 in C) needs llm_memory.c, which a student who wrote memory_manager.py never wrote.
OPTIONAL_TRACKS = {re.compile(r"^\d\dc_.*\.ipynb$"): "llm_memory.c"}


@dataclass
class NotebookOutcome:
    name: str
    passed: bool
    output: str
    seconds: float
    max_score: float = NOTEBOOK_POINTS

    @property
    def score(self) -> float:
        return self.max_score if self.passed else 0.0


def notebook_dir(echo=None) -> Path:
    """The course folder's notebooks/: the student's own copy, found from the working directory
    (not the installed library's). Under root only when root alone can change it: a folder above
    the working directory could be a submission's planting, and then the installation's are run."""
    found = course.root() / "notebooks"
    if os.geteuid() != 0:
        return found
    try:  # a missing notebooks/: nobody but root may be able to make one
        course.require_root_only(found if found.exists() else found.parent)
        return found
    except course.UntrustedFolder as exc:
        trusted = course.trusted_root()
        if trusted is None:
            raise
        if echo is not None:
            echo(f"--notebooks: not running {found}: {exc}; running {trusted / 'notebooks'} instead")
        return trusted / "notebooks"


def notebook_paths(folder: Path | None = None, submission: Path | None = None) -> list[Path]:
    """The numbered notebooks of `folder`, and the optional tracks' (02c) whose file `submission` has."""
    folder = notebook_dir() if folder is None else folder
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NUMBERED.match(p.name) or (
        submission is not None and optional_file(p) and (submission / optional_file(p)).is_file()))


def optional_file(path: Path) -> str:
    """The student file an optional track's notebook runs on ('' for a notebook of the course)."""
    return next((file for pattern, file in OPTIONAL_TRACKS.items() if pattern.match(path.name)), "")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NO_TESTS_COLLECTED = 5  # pytest's exit code when a notebook has no code cells


def _summary(output: str) -> str:
    """The failing cells and the end of the first error, short enough for Gradescope."""
    lines = [line for line in _ANSI.sub("", output).splitlines() if line.strip()]
    summary_at = next((i for i, line in enumerate(lines) if "short test summary info" in line), len(lines))
    failures = lines[summary_at + 1:]
    first_error = [line for line in lines[:summary_at] if not line.startswith(("platform ", "rootdir", "plugins", "cachedir"))]
    text = "\n".join(failures[:20])
    if first_error:
        text += "\n\nthe last error:\n" + "\n".join(first_error[-25:])
    return text.strip()


def run_notebook(path: Path, impl: str, sandbox=None) -> NotebookOutcome:
    env = dict(os.environ)
    env["PAGEDLAB_IMPL"] = impl
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    env["NO_COLOR"] = "1"
    limit = NOTEBOOK_TIME_LIMIT * time_scale()
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", str(path), "-q", "-p", "no:cacheprovider",
           "-o", "addopts=", f"--rootdir={path.parent}", "--color=no", "-r", "f"]
    sanitize = path.parent / "nbval.cfg"
    if sanitize.is_file():
        cmd += ["--nbval-sanitize-with", str(sanitize)]
    # Its output comes back through root's own descriptor (never a path the notebook could replace).
    end = run_limited(cmd, env=env, timeout=limit, memory_bytes=memory_limit() * 2**30, cwd=path.parent,
                      sandbox=sandbox, loopback=True)
    if end.timed_out:
        return NotebookOutcome(path.name, False, f"timed out after {limit:.0f} s\n{_summary(end.output)}", end.seconds)
    if end.returncode == NO_TESTS_COLLECTED:
        return NotebookOutcome(path.name, True, "no code cells to run", end.seconds)
    passed = end.returncode == 0
    text = "every cell ran without an error" if passed else _summary(end.output)
    return NotebookOutcome(path.name, passed, text, end.seconds)
