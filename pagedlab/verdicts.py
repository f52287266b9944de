"""Verdicts root made, for the graded cells of a grader's notebook run.

In `pagedlab grade --notebooks` the notebooks run as the sandbox user, which may read no expected
value (grading/setup.sh seals them: pagedlab/sandbox/private.py). So the notebooks' graded cells
do not judge: before the notebooks start, root runs each task they use the way `pagedlab grade`
does (the child records as the sandbox user, root judges) and writes the verdicts here, in a
root-owned file the sandbox user may read (its path in PAGEDLAB_VERDICTS). A graded cell and a
`require` then look their task up instead of running checks (`pagedlab.graded`).

A verdict names its check, pass or fail, the rule and a gist of what went wrong, never an
expected or an observed value: those stay in the task's report, which root prints. It is keyed
by the task and a digest of the very files it judged, so a cell asking about other bytes (a file
the kernel wrote, another folder) finds nothing and fails, and no verdict is taken for files it
was not made for.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import track
from .spec import manifest

ENV = "PAGEDLAB_VERDICTS"
VERSION = 1
MAX_BYTES = 4 * 1024 * 1024  # a whole course's verdicts are ~40 KB


# A task's outcome as the grader decided it (`pagedlab.grader.pipeline`), and as a graded cell of a
# grader's notebook run rebuilds it from a verdict: here, where that kernel may import it.
@dataclass
class CheckOutcome:
    name: str
    passed: bool | None  # None: never finished (the process died or hung inside it)
    message: str = ""
    seconds: float = 0.0
    scored: bool = True  # False: feedback only (the manifest's `feedback`)
    hidden: bool = False  # an instructor-only check: shown as a count, not by name
    rule: str = ""  # the rule the first difference broke (shown for hidden checks too)
    gist: str = ""  # what went wrong, without the scenario's values (a hidden check's reason)
    cause: str = ""  # a cause other checks may share (`grader.causes`): explained once
    hint: str = ""  # the conditional hints under the first difference, as written (shown for hidden checks too)


@dataclass
class TaskOutcome:
    row: manifest.Task
    checks: list[CheckOutcome] = field(default_factory=list)
    problem: str = ""  # why the task could not finish: crash, timeout, missing file, grader error
    grader_error: bool = False  # the problem is the autograder's, not the student's
    started: bool = False  # the child listed the task's checks
    finished: bool = False  # the child reported every check
    note: str = ""
    seconds: float = 0.0
    part_a: track.Track | None = None  # a Part A task: which file it was graded from, and why

    @property
    def task(self) -> str:
        return self.row.id

    @property
    def scored_checks(self) -> list[CheckOutcome]:
        return [c for c in self.checks if c.scored]

    @property
    def passed_checks(self) -> int:
        return sum(1 for c in self.scored_checks if c.passed)

    @property
    def passed(self) -> bool:
        """Every scored check ran and passed (a crash in a feedback-only check costs nothing
        unless scored checks after it never ran)."""
        scored = self.scored_checks
        return not self.grader_error and bool(scored) and all(c.passed is True for c in scored)

    @property
    def score(self) -> float:
        if self.passed:
            return float(self.row.points)
        scored = self.scored_checks
        if self.row.partial and scored and not self.grader_error:
            return round(self.row.points * self.passed_checks / len(scored), 2)
        return 0.0


def task_files(row, folder: Path) -> list[Path]:
    """The files of `folder` the task's checks may read: its own files and the ones that stand in
    for them (llm_memory.c for memory_manager.py), whichever the loader then takes."""
    from .engine.ctrack import ALTERNATE_FILES

    names = []
    for name in row.files:
        names += [name, *ALTERNATE_FILES.get(name, ())]
    return [folder / name for name in dict.fromkeys(names) if (folder / name).is_file()]


def digest(row, folder: Path) -> str:
    """The digest of one version of a student's work on `row`: each file's name and bytes."""
    found = hashlib.sha256()
    for path in task_files(row, Path(folder)):
        data = path.read_bytes()
        found.update(f"{path.name}\0{len(data)}\0".encode())
        found.update(data)
    return found.hexdigest()


def part_a(row, folder: Path, choice: str | None = None) -> str:
    """The track a Part A task is judged on for these files and `choice` (pagedlab.track's rule:
    --track or track="c", then PAGEDLAB_TRACK, track.txt, the stubs); '' for any other task."""
    from . import track

    return track.decide(folder, choice).name if track.PYTHON_FILE in row.files else ""


def key(row, folder: Path, choice: str | None = None) -> str:
    return f"{row.id}:{part_a(row, folder, choice)}:{digest(row, folder)}"


def entry(outcome) -> dict:
    """What a notebook may know of a task's outcome (`TaskOutcome`, above): its public
    checks' names, marks, rules and gists. Hidden checks stay out, as a student's own graded cell
    never runs them."""
    public = [c for c in outcome.checks if not c.hidden]
    return {"task": outcome.row.id,
            "checks": [{"name": c.name, "passed": c.passed, "scored": c.scored, "rule": c.rule, "gist": c.gist}
                       for c in public],
            "problem": outcome.problem if not public or outcome.grader_error else "",
            "grader_error": outcome.grader_error}


def passed(found: dict) -> bool:
    """Whether every scored public check of a verdict passed, as `TaskOutcome.passed` says."""
    scored = [c for c in found.get("checks", []) if c.get("scored")]
    return not found.get("grader_error") and bool(scored) and all(c.get("passed") is True for c in scored)


def write(path: Path, verdicts: dict[str, dict], *, group: int | None = None) -> Path:
    """Write `verdicts` (key -> entry) to a new file at `path`, in a folder only root may write;
    readable by `group` (the sandbox user's) when given."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, json.dumps({"version": VERSION, "verdicts": verdicts}).encode())
        if group is not None:
            os.fchown(fd, 0, group)
            os.fchmod(fd, 0o640)
    finally:
        os.close(fd)
    return path


def active() -> str:
    """The verdict file of this notebook run, or '' outside a grader's run."""
    return os.environ.get(ENV, "")


def lookup(row, folder: Path, choice: str | None = None) -> dict | None:
    """The verdict root made for `row` on the files now in `folder` (on `choice`'s track), None if
    it made none."""
    with open(active(), "rb") as f:
        data = json.loads(f.read(MAX_BYTES))
    return data.get("verdicts", {}).get(key(row, folder, choice))
