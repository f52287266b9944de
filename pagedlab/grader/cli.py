"""`pagedlab grade`: score a submission task by task.

    pagedlab grade                              # exercises/ (or $PAGEDLAB_IMPL)
    pagedlab grade --impl solutions             # the reference: must score full marks
    pagedlab grade --impl path/to/submission --json results.json
    pagedlab grade --gradescope                 # inside Gradescope's autograder container
    pagedlab grade --tasks 1,3 --impl solutions # only some tasks (quick checks while writing)
    pagedlab grade --track c                    # Part A from llm_memory.c even if memory_manager.py is edited
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .. import loader, track
from ..sandbox import trusted_builds, users
from ..sandbox.policy import Policy
from ..sandbox.process import isolation_note, notebook_isolation_note
from ..sandbox.workspace import remove_tree
from ..spec import points
from ..untrusted import escape, escape_json
from . import judge_service, notebook_plan, registry, report, submission
from .notebooks import kernel_folder, notebook_dir, notebook_paths, prepare_verdicts, run_notebook
from .pipeline import printable, run_task
from .usable import interpreter_problem

# Gradescope's fixed layout; overridable so the --gradescope path can be tested anywhere.
AUTOGRADER_ROOT_ENV = "PAGEDLAB_AUTOGRADER_ROOT"


def autograder_root() -> Path:
    return Path(os.environ.get(AUTOGRADER_ROOT_ENV) or "/autograder")


def _say(text: str = "") -> None:
    try:
        print(escape(text), flush=True)  # file names and messages are the submission's text
    except BrokenPipeError:  # `pagedlab grade | head`: stop printing, keep grading
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _resolve_impl(impl: str | None, workdir: Path, sandbox, track_choice: str | None = None) -> tuple[str, Path, str]:
    """(the impl string the children get, its folder, a note on the submission's files)."""
    if impl is None:
        impl = os.environ.get(loader.ENV_VAR) or "exercises"
    if impl in loader.NAMED_IMPLS:
        return impl, loader.impl_dir(impl), ""
    folder, found = submission.prepare(Path(impl), workdir / "submission", track_choice=track_choice)
    if sandbox is not None:
        # Only this job's user may read the copy: a classmate graded at the same time under
        # another user of the pool can list /tmp, but not enter this folder.
        for path in (folder, *folder.iterdir()):
            os.chown(path, 0, sandbox.gid)
            path.chmod(0o750 if path.is_dir() else 0o640)
    return str(folder), folder, found


def grade(impl: str | None = None, *, tasks: list[str] | None = None, notebooks: bool = False,
          json_path: str | os.PathLike | None = None, echo=_say, hidden: bool | str | os.PathLike = True,
          hidden_seed: int | None = None, track_choice: str | None = None) -> dict:
    """Grade `impl` and return the results.json dict (also written to `json_path` if given).

    `hidden`: True runs the instructor's hidden checks when this edition has them (grading/hidden/),
    a path names another folder of them, False runs the public checks only. `track_choice`: "c" or
    "python" grades Part A from that file; None decides from the files (pagedlab/track.py).
    """
    began = time.perf_counter()
    rows = points.select(tasks)
    track_choice = track.parse(track_choice, "--track")
    # This job's own user of the pool, held until the grading ends (never one another job holds).
    with users.claimed(echo=echo) as sandbox:
        if sandbox is not None:
            problem = interpreter_problem(sandbox)
            if problem:
                raise ValueError(problem)
        return _grade(rows, impl, sandbox, began, tasks=tasks, notebooks=notebooks, json_path=json_path,
                      echo=echo, hidden=hidden, hidden_seed=hidden_seed, track_choice=track_choice)


def _grade(rows, impl, sandbox, began, *, tasks, notebooks, json_path, echo, hidden, hidden_seed,
           track_choice) -> dict:
    hidden_from = None
    if hidden and not isinstance(hidden, bool):
        hidden_from = Path(hidden)
        if not hidden_from.is_dir():
            raise FileNotFoundError(f"--hidden {hidden_from}: no such folder of hidden checks")
    elif hidden:
        hidden_from = registry.hidden_dir()
    policy = Policy.from_env()  # the instructor's sandbox knobs, once: a bad one stops here
    workdir = tempfile.mkdtemp(prefix="pagedlab-grade-")
    part_a = None
    try:
        Path(workdir).chmod(0o711)  # the tasks' user reaches the submission copy inside
        if sandbox is not None:
            cache = Path(workdir) / "cache"
            cache.mkdir(mode=0o700)
            sandbox.own(cache)
            # pagedlab's own programs come built from root's folder; the student's go in `cache`.
            trusted = (trusted_builds.prepare(None if notebooks else rows)
                       if notebooks or trusted_builds.needed(rows) else None)
            sandbox = dataclasses.replace(sandbox, cache=cache, trusted=trusted)
        impl_arg, folder, found = _resolve_impl(impl, Path(workdir), sandbox, track_choice)
        found = printable(found)  # the upload's file names, shown in the output
        # Which file Part A is graded from, and why: said before anything else about the grade.
        part_a = track.decide(folder, track_choice) if any(track.PYTHON_FILE in r.files for r in rows) else None
        if sandbox is not None:
            echo(f"(the submission's code runs as user {sandbox.name!r}; {isolation_note()})")
            if notebooks:
                echo(f"(--notebooks: {notebook_isolation_note()})")
            from ..loader import ROOT
            from ..sandbox import private

            readable = private.exposed(ROOT)
            if readable:  # the image seals them (grading/setup.sh); a checkout may not have
                echo(f"warning: the submission's code can read {', '.join(readable)}: run "
                     f"`python -m pagedlab.sandbox.private seal {ROOT}` as root to make them root-only")
        echo(f"Grading {impl_arg if impl_arg in loader.NAMED_IMPLS else folder} "
             f"({len(rows)} task{'s' if len(rows) != 1 else ''}, each in its own process)")
        if part_a is not None:
            echo(part_a.line())
        if found:
            echo(found)
        if hidden and hidden_from is None:
            echo("(no hidden checks: they are instructor-only and not part of this edition; "
                 "public checks only)")
        outcomes, shown = [], {}  # shown: causes explained once per grade (a file that does not compile)
        for row in rows:
            outcome = run_task(row, impl_arg, folder, sandbox=sandbox, hidden=hidden_from is not None,
                               hidden_seed=hidden_seed, hidden_from=hidden_from, track_choice=track_choice,
                               shown=shown, policy=policy)
            if impl_arg not in loader.NAMED_IMPLS:  # the grader's private copy: show the file's own name
                _strip_folder(outcome, f"{folder}{os.sep}")
            outcomes.append(outcome)
            mark = "✓" if outcome.passed else "✗"
            echo(f"{mark} {row.id:<6} {outcome.score:g}/{row.points:g}  ({outcome.seconds:.1f}s)  {row.label}")
            if not outcome.passed:
                echo(report.indent(report.task_output(outcome, track=False), "      "))
        nb_outcomes = []
        if notebooks:
            nb_outcomes = _run_notebooks(tasks, outcomes, impl_arg, folder, Path(workdir), sandbox, echo, track_choice)
    finally:
        # The cache is the user's: removed without following a link or recursing on its depth.
        remove_tree(Path(workdir))
    table = report.score_table(outcomes, nb_outcomes)
    echo()
    echo(table)
    header = [
        f"pagedlab autograder: {sum(o.score for o in outcomes):g}/{sum(o.row.points for o in outcomes):g} points."
        + (f"\n{part_a.line()}" if part_a is not None else ""),  # its second line: which Part A file
        "Each task runs in its own process with a time limit; a task earns its points when all of its "
        "scored checks pass (each task's output lists its checks and explains the first failure).",
    ]
    if found:
        header.append(found)
    header.append(table)
    results = report.results_json(outcomes, nb_outcomes, execution_time=time.perf_counter() - began,
                                  output="\n\n".join(header))
    if json_path is not None:
        write_json(results, Path(json_path))
        echo(f"\nwrote {json_path}")
    return results


def _run_notebooks(tasks, outcomes, impl_arg: str, submission: Path, workdir: Path, sandbox, echo,
                   track_choice: str | None = None) -> list:
    """--notebooks: the notebooks of the graded tasks (all of them without --tasks), their graded
    cells reading the verdicts root makes first (`notebooks.prepare_verdicts`)."""
    folder = notebook_dir(echo)
    every = notebook_paths(folder, submission)
    if not every:
        echo(f"--notebooks: no numbered notebooks in {folder}; nothing to run")
        return []
    paths, left_out = notebook_plan.select(every, tasks)
    if left_out:
        echo(f"--notebooks with --tasks: {', '.join(p.stem for p in paths) or 'no notebook'} "
             f"(the notebooks of those tasks); not run: {', '.join(p.stem for p in left_out)}")
    judged = prepare_verdicts(paths, outcomes, impl=impl_arg, folder=submission, workdir=workdir,
                              sandbox=sandbox, echo=echo, track_choice=track_choice)
    found = []
    # The judge answers the demos only now: every check child of this job has ended.
    with judge_service.serving(kernel_folder(workdir, sandbox), sandbox.gid if sandbox else None) as judge:
        for path in paths:
            nb = run_notebook(path, impl_arg, sandbox, verdict_file=judged.path, judge=judge,
                              failed_tasks=judged.failed.get(path.name), track_choice=track_choice)
            found.append(nb)
            echo(f"{'✓' if nb.passed else '✗'} notebook {nb.name} ({nb.seconds:.0f}s)"
                 + (f": {nb.reason}" if nb.reason else ""))
    return found


def _strip_folder(outcome, prefix: str) -> None:
    for c in outcome.checks:
        c.message = c.message.replace(prefix, "")
    outcome.problem = outcome.problem.replace(prefix, "")


def write_json(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    # Control characters and lone surrogates from the submission's text are written escaped.
    tmp.write_text(json.dumps(escape_json(results), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # a reader never sees half a file


def _grader_failure(exc: BaseException) -> dict:
    """results.json for when the grader itself broke: say so instead of leaving Gradescope empty."""
    return {
        "score": 0.0,
        "execution_time": 0,
        "output": "The pagedlab autograder itself failed (not your code); tell your instructor.\n\n"
                  + "".join(traceback.format_exception(exc))[-4000:],
        "tests": [],
    }


def main(args) -> int:
    impl, json_path = args.impl, args.json
    tasks = getattr(args, "tasks", None)
    if isinstance(tasks, str):
        tasks = [t for t in tasks.replace(" ", ",").split(",") if t]
    if args.gradescope:
        root = autograder_root()
        impl = impl or str(root / "submission")
        json_path = json_path or str(root / "results" / "results.json")
    try:
        points.select(tasks)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        hidden = False if getattr(args, "no_hidden", False) else (getattr(args, "hidden", None) or True)
        grade(impl, tasks=tasks, notebooks=args.notebooks, json_path=json_path, hidden=hidden,
              track_choice=getattr(args, "track", None))
    except (FileNotFoundError, ValueError) as exc:
        if json_path is not None:
            what = "No submission to grade" if isinstance(exc, FileNotFoundError) else "Grader misconfigured"
            write_json(_grader_failure(exc) | {"output": f"{what}: {exc}"}, Path(json_path))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if json_path is not None:
            write_json(_grader_failure(exc), Path(json_path))
        raise
    return 0
