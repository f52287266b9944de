"""`pagedlab grade --notebooks`: run each course notebook top to bottom under nbval.

Each notebook runs in its own pytest process with PAGEDLAB_IMPL pointing at the submission, so
its demo cells run the student's code. Notebooks are reported, not scored (0 points): the same
checks are already scored task by task, and a notebook failing on a plotting cell should not
cost points. An instructor who wants points sets NOTEBOOK_POINTS in points.py.

Graded cells do not judge in the notebook: its kernel runs as the sandbox user, which may read no
expected value. Root judges every task the chosen notebooks name first, the way `pagedlab grade`
does (`prepare_verdicts`; the task grade's own outcomes where it has them), and the kernel reads
those verdicts (`pagedlab.verdicts`). A graded cell whose task root failed fails the notebook
even if the kernel raised nothing there (`run_notebook`'s `failed_tasks`): whatever ran in the
kernel cannot talk a notebook into passing.

Under a sandbox user the run is sealed like a check child (`Policy(loopback=True)`):
PID and mount namespaces, private temporary folders, cgroups, and every Python process of it
(pytest, the Jupyter kernel, what the notebook starts) non-dumpable under a seccomp filter; its
Internet sockets stay in a network namespace where only the loopback is up.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import course, judge_link, verdicts
from ..sandbox.policy import Policy
from ..sandbox.process import run_limited
from ..spec import manifest
from ..spec.points import memory_limit, time_scale
from ..track import ENV_VAR as TRACK_ENV
from ..track import FILES as _TRACK_FILES
from ..untrusted import clip, escape_line
from . import notebook_plan
from .notebook_plan import OPTIONAL_TRACKS, optional_file  # noqa: F401 - where callers found them
from .pipeline import PACKAGE_PARENT, run_task

NOTEBOOK_POINTS = 0.0
NOTEBOOK_TIME_LIMIT = 300.0  # seconds per notebook
_NUMBERED = re.compile(r"^\d\d_.*\.ipynb$")
RECORD_CAP = 256 * 1024  # the nbrecord plugin's lines: ~100 bytes a cell
MAX_ERROR = 300  # characters of a cell's error shown


@dataclass
class NotebookOutcome:
    name: str
    passed: bool
    output: str
    seconds: float
    max_score: float = NOTEBOOK_POINTS
    reason: str = ""  # one line: the first failing cell, its first line and its error's last line

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



@dataclass
class NotebookVerdicts:
    """The verdict file the notebooks' kernels read, and what root needs to check them after."""

    path: Path | None
    failed: dict  # notebook name -> {task: label} whose verdict, as its graded cells see it, failed


def prepare_verdicts(paths: list[Path], outcomes: list, *, impl: str, folder: Path, workdir: Path,
                     sandbox=None, echo=None, track_choice: str | None = None) -> NotebookVerdicts:
    """Judge, as `pagedlab grade` does, every task the notebooks in `paths` name, on the files
    and track each notebook runs on (the grade's; 02c: Part A from llm_memory.c), and write the
    verdicts where the notebooks' kernels read them. The task grade's `outcomes` are reused; a
    task it did not grade (a `require` of a notebook `--tasks` picked) or not on that track runs
    its public checks now, for the notebooks only (no points)."""
    graded = {verdicts.key(o.row, folder, track_choice): o for o in outcomes}
    found: dict[str, dict] = {}
    failed: dict[str, dict] = {}
    extra: dict[str, list[str]] = {}  # "" or "from llm_memory.c, for 02c" -> "✓ task1", ...
    for path in paths:
        optional = notebook_plan.optional_file(path)  # 02c: llm_memory.c, its graded cells' track="c"
        choice = next((name for name, file in _TRACK_FILES.items() if file == optional), None) or track_choice
        failed[path.name] = {}
        graded_tasks = {t for c in notebook_plan.code_cells(path) if c.graded for t in c.tasks}
        for task in sorted(notebook_plan.tasks_used(path), key=lambda t: manifest.task(t).number):
            row = manifest.task(task)
            key = verdicts.key(row, folder, choice)
            if key not in found:
                outcome = graded.get(key)
                if outcome is None:
                    outcome = run_task(row, impl, folder, sandbox=sandbox, hidden=False, track_choice=choice)
                    where = f"from {optional}, for {path.stem.split('_')[0]}" if choice != track_choice else ""
                    extra.setdefault(where, []).append(f"{'✓' if outcome.passed else '✗'} {row.id}")
                found[key] = verdicts.entry(outcome)
            if task in graded_tasks and not verdicts.passed(found[key]):
                failed[path.name][task] = row.label
    if echo is not None and extra:
        said = "; ".join(f"{where}: " * bool(where) + ", ".join(marks) for where, marks in extra.items())
        echo(f"(--notebooks: judged for the notebooks' graded cells and demos, public checks, no points: {said})")
    if not found:
        return NotebookVerdicts(None, failed)
    return NotebookVerdicts(verdicts.write(kernel_folder(workdir, sandbox) / "verdicts.json", found,
                                           group=sandbox.gid if sandbox is not None else None), failed)


def kernel_folder(workdir: Path, sandbox=None) -> Path:
    """Root's folder for what the notebooks' kernels read or reach (the verdicts, the judge's
    socket): they may enter it, never write it, so root never opens a path they could replace."""
    where = workdir / "for-notebooks"
    if not where.is_dir():
        where.mkdir(mode=0o700)
        if sandbox is not None:
            os.chown(where, 0, sandbox.gid)
            where.chmod(0o750)
    return where


def _read_record(data: bytes) -> tuple[int, dict[int, str]]:
    """(the last code cell that began, {failed cell: its error's last line}) from the nbrecord
    plugin's lines: the sandbox's writing, so capped, clipped, and what cannot be read skipped."""
    began, failures = 0, {}
    for line in data.splitlines()[:10_000]:
        try:
            event = json.loads(line[:4096].decode("utf-8", "replace"))
        except ValueError:
            continue
        cell = event.get("cell") if isinstance(event, dict) else None
        if type(cell) is not int or not 0 < cell < 100_000:
            continue
        if event.get("event") == "begin":
            began = cell
        elif event.get("event") == "failed" and cell not in failures:
            failures[cell] = escape_line(clip(_ANSI.sub("", str(event.get("error") or "failed")), MAX_ERROR))
    return began, failures


def _where(path: Path, number: int) -> str:
    found = notebook_plan.cell(path, number)
    line = escape_line(clip(found.first_line, 120)) if found is not None else "?"
    return f"code cell {number} `{line}`"


def run_notebook(path: Path, impl: str, sandbox=None, *, verdict_file: Path | None = None,
                 judge: Path | None = None, failed_tasks: dict | None = None,
                 track_choice: str | None = None) -> NotebookOutcome:
    """Run `path` under nbval on `impl`. `verdict_file`: root's verdicts its graded cells read;
    `judge`: the socket where root answers its demos' judge-side questions (`judge_service`).
    `failed_tasks` ({task: label}): tasks whose verdict root failed; a graded cell of one of them
    fails the notebook whether or not it raised in the kernel."""
    env = dict(os.environ)
    env["PAGEDLAB_IMPL"] = impl
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    env["NO_COLOR"] = "1"
    if track_choice:  # --track: the kernel's Part A (and its verdicts' keys) follow it too
        env[TRACK_ENV] = track_choice
    for name, value in ((verdicts.ENV, verdict_file), (judge_link.ENV, judge)):
        env.pop(name, None)
        if value is not None:
            env[name] = str(value)
    limit = NOTEBOOK_TIME_LIMIT * time_scale()
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", str(path), "-q", "-p", "no:cacheprovider",
           "-p", "pagedlab.drivers.nbrecord", "-o", "addopts=", f"--rootdir={path.parent}", "--color=no", "-r", "f"]
    sanitize = path.parent / "nbval.cfg"
    if sanitize.is_file():
        cmd += ["--nbval-sanitize-with", str(sanitize)]
    # Its output and record come back through root's own descriptors (never a path the notebook
    # could replace).
    policy = Policy.from_env().but(timeout=limit, memory_bytes=memory_limit() * 2**30, sandbox=sandbox,
                                   loopback=True, record_cap=RECORD_CAP)
    end = run_limited(cmd, policy, env=env, cwd=path.parent)
    began, failures = _read_record(end.record)
    problems = {number: f"{_where(path, number)}: {error}" for number, error in failures.items()}
    # A graded cell of a task root failed, which raised nothing in the kernel: its verdict was
    # skipped there (a submission that replaced pagedlab.graded.run, say). Root's verdict stands.
    cells = notebook_plan.code_cells(path)
    reached = began if end.timed_out else len(cells)  # nbval tries every cell unless time ran out
    for c in cells:
        missed = [label for task, label in (failed_tasks or {}).items() if c.graded and task in c.tasks]
        if missed and c.number not in problems and c.number <= reached:
            problems[c.number] = (f"{_where(path, c.number)}: {missed[0]} failed when the grader judged it, "
                                  "but this graded cell raised nothing in the notebook's kernel")
    if end.timed_out:
        reason = f"timed out after {limit:.0f} s" + (f" in {_where(path, began)}" if began else "")
        return NotebookOutcome(path.name, False, "\n".join([reason, *_later(problems)]), end.seconds, reason=reason)
    if end.returncode == NO_TESTS_COLLECTED and not problems:
        return NotebookOutcome(path.name, True, "no code cells to run", end.seconds)
    if end.returncode == 0 and not problems:
        return NotebookOutcome(path.name, True, "every cell ran without an error", end.seconds)
    if not problems:  # pytest itself failed (a notebook it cannot read): its own words
        reason = f"nbval failed (exit code {end.returncode}) before any cell failed"
        return NotebookOutcome(path.name, False, f"{reason}\n{_summary(end.output)}", end.seconds, reason=reason)
    first = min(problems)
    return NotebookOutcome(path.name, False, "\n".join([problems[first], *_later(problems, first)]),
                           end.seconds, reason=problems[first])


def _later(problems: dict, first: int | None = None, shown: int = 8) -> list[str]:
    """The failing cells after the first, a line each (the first cell's failure often explains
    them: what it would have made is missing below)."""
    rest = [problems[n] for n in sorted(problems) if n != first]
    if not rest:
        return []
    lines = ["", f"{len(rest)} later cell{'s' if len(rest) != 1 else ''} also failed:"]
    lines += [f"  {line}" for line in rest[:shown]]
    if len(rest) > shown:
        lines.append(f"  … and {len(rest) - shown} more")
    return lines
