"""`pagedlab` command line: doctor and grade for everyone; assign and release for instructors."""

from __future__ import annotations

import argparse
import sys


def _instructor_edition() -> bool:
    """The course folder has solutions/: the instructor edition (assign and release make sense)."""
    from .course import find

    folder = find()
    return folder is not None and (folder / "solutions").is_dir()


INSTRUCTOR_ONLY = ("assign", "release", "notebook", "link", "grade-class", "grade-index", "class-report")
NOT_HERE = ("`pagedlab {cmd}` is an instructor command: it needs solutions/, which this copy of the "
            "course does not have. Nothing was changed; your files in exercises/ are yours.")


def _assign(args) -> int:
    from . import assign

    if not _instructor_edition():
        print(NOT_HERE.format(cmd="assign"), file=sys.stderr)
        return 2
    missing = _missing_checks_modules()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    try:
        if args.check:
            return _assign_check(assign)
        done = assign.write(force=args.force)
    except assign.AssignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rel = lambda p: p.relative_to(assign.course_root()) if p.is_relative_to(assign.course_root()) else p  # noqa: E731
    from . import doctables, loader, track
    from .grader import golden

    for path in doctables.write(loader.ROOT):
        print(f"wrote {rel(path)} (its task tables, from pagedlab/spec/tasks.toml)")
    if golden.stale():  # the reference's records of the public checks follow solutions/
        print(f"wrote {rel(golden.write())} (the reference's record of every public check)")
    stubs = _track_stubs(assign)
    if track.stale(stubs):  # so a student's untouched stub is never graded over their finished file
        print(f"wrote {rel(track.record(stubs))} (the fingerprints of the Part A stubs)")
    if done.backup is not None:
        print(f"saved the edited files to {rel(done.backup)}/ before replacing them")
    for path in done.written:
        print(f"wrote {rel(path)}")
    for path in done.removed:
        print(f"removed {rel(path)} (generated earlier, untouched, no longer in solutions/)")
    if done.kept:
        print("kept these files exactly as they are: they differ from what assign last generated, "
              "so someone edited them (a student's work, or a hand edit):", file=sys.stderr)
        for path in done.kept:
            print(f"  {rel(path)}", file=sys.stderr)
        print("Instructor: `pagedlab assign --force` replaces them after copying each one to "
              "backups/assign-<time>/.", file=sys.stderr)
        return 1
    if not (done.written or done.removed):
        print("exercises/ already up to date")
    return 0


def _missing_checks_modules() -> str:
    """One line naming each checks module the manifest asks for that does not exist, or ''."""
    import importlib.util

    from .spec import manifest

    missing = [row for row in manifest.TABLE if importlib.util.find_spec(f"pagedlab.drivers.{row.checks}") is None]
    return "; ".join(f"{row.id} in pagedlab/spec/tasks.toml names checks = \"{row.checks}\", but "
                     f"pagedlab/drivers/{row.checks}.py does not exist (write it before assign: "
                     "README, Adding Task N, step 2)" for row in missing)


def _track_stubs(assign) -> dict[str, str]:
    """The Part A stubs assign generates today (file name -> text)."""
    from . import track

    return {path.name: text for path, text in assign.plan().items() if path.name in track.FILES.values()}


def _assign_check(assign) -> int:
    from . import doctables, loader, track
    from .grader import golden

    s = assign.survey()
    problems = assign.stale()
    problems += [f"{p.relative_to(loader.ROOT)}: its task tables differ from pagedlab/spec/tasks.toml"
                 for p in doctables.stale(loader.ROOT)]
    if golden.stale():
        problems.append("pagedlab/grader/expected.json: the reference's records predate solutions/ or "
                        "the checks")
    problems += [f"pagedlab/stubs.json: no fingerprint of today's {name} stub" for name in track.stale(_track_stubs(assign))]
    if s.edited or s.extra:
        print("exercises/: these files were edited (or added) after the exercises were generated. "
              "They are the student's work and are kept as they are:")
        for path in s.edited + s.extra:
            print(f"  {s.rel(path)}")
    if problems:
        print("exercises/ is out of date with solutions/ (the instructor changed solutions/ and "
              "has not regenerated); `pagedlab assign` rewrites only files nobody edited:",
              file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print("exercises/ is up to date with solutions/" + (" (edited files aside)" if s.edited else ""))
    return 0


def _release(args) -> int:
    from . import release

    if not _instructor_edition():
        print(NOT_HERE.format(cmd="release"), file=sys.stderr)
        return 2
    try:
        report = release.build(args.out, force=args.force)
    except release.ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0


def _doctor(args) -> int:
    from . import doctor

    return doctor.main()


def _grade(args) -> int:
    from .grader import cli as grade_cli

    return grade_cli.main(args)


def _grade_class(args) -> int:
    from .grader import classroom

    return classroom.main(args)


def _class_report(args) -> int:
    from .grader import class_report

    return class_report.main(args)


def _grade_index(args) -> int:
    from .grader import array_task

    return array_task.main(args)


def _notebook(args) -> int:
    from . import notebooks

    return notebooks.main(args)


def _link(args) -> int:
    from .deploy import nbgitpuller_link

    try:
        print(nbgitpuller_link(args.hub, args.repo, branch=args.branch, path=args.path))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    # A student's copy has no solutions/: the instructor commands stay out of its --help.
    instructor = _instructor_edition()
    parser = argparse.ArgumentParser(prog="pagedlab", description=__doc__ if instructor else
                                     "pagedlab: check your set-up (doctor), grade your exercises (grade).")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, help_text, instructor_only=False):
        if instructor or not instructor_only:
            return sub.add_parser(name, help=help_text)
        return sub.add_parser(name)  # no help=: argparse leaves it out of the listing

    p = command("assign", "(instructor) regenerate exercises/ from solutions/; never overwrites "
                "an edited file", instructor_only=True)
    p.add_argument("--check", action="store_true", help="fail (exit 1) if solutions/ changed and "
                   "exercises/ was not regenerated (edited files are reported, not an error)")
    p.add_argument("--force", action="store_true", help="also replace edited files, after copying "
                   "them to backups/assign-<time>/")
    p.set_defaults(func=_assign)

    p = command("release", "(instructor) write the student edition (no solutions/, no hidden "
                "checks) to a new folder", instructor_only=True)
    p.add_argument("out", help="the folder to create (must not exist, or be empty)")
    p.add_argument("--force", action="store_true", help="replace an earlier student edition in "
                   "OUT (its .git is kept)")
    p.set_defaults(func=_release)

    p = sub.add_parser("doctor", help="what the course needs and what this machine has")
    p.set_defaults(func=_doctor)

    p = sub.add_parser("grade", help="run the graded checks task by task and score them")
    p.add_argument("--impl", default=None, help="exercises, solutions or a submission folder")
    p.add_argument("--json", default=None, metavar="PATH", help="write Gradescope results.json here")
    p.add_argument("--notebooks", action="store_true",
                   help="also run each notebook under nbval on the submission, 0 points each (with --tasks: the notebooks of those tasks)")
    p.add_argument("--gradescope", action="store_true", help="read ROOT/submission, write ROOT/results/results.json; ROOT is $PAGEDLAB_AUTOGRADER_ROOT, default /autograder")
    p.add_argument("--tasks", default=None, metavar="LIST", help="only these tasks, e.g. task1,task3 or 1,3")
    p.add_argument("--hidden", default=None, metavar="DIR", help="folder of hidden checks (default: grading/hidden/ when present)")
    p.add_argument("--no-hidden", action="store_true", help="public checks only")
    p.add_argument("--track", choices=["c", "python"], default=None, help="grade Part A (Tasks 1-5) "
                   "from llm_memory.c (c) or memory_manager.py (python); default: the one that is not "
                   "the untouched stub (Python when both are edited), or exercises/track.txt's choice")
    p.set_defaults(func=_grade)

    p = command("grade-class", "(instructor) grade every submission of a class; grades.csv, "
                "report.html, similar pairs (grading/README.md)", instructor_only=True)
    p.add_argument("submissions", help="a folder of per-student folders, a zip of them, or a Gradescope export")
    p.add_argument("--out", required=True, metavar="DIR", help="where results, grades.csv and report.html go")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="submissions at a time (default: cores)")
    p.add_argument("--tasks", default=None, metavar="LIST", help="only these tasks, e.g. 1,2,6")
    p.add_argument("--hidden", default=None, metavar="DIR", help="folder of hidden checks (as for grade)")
    p.add_argument("--no-hidden", action="store_true", help="public checks only")
    p.add_argument("--track", choices=["c", "python"], default=None, help="grade every student's Part A "
                   "from llm_memory.c (c) or memory_manager.py (python); default: each submission's files "
                   "decide, as for grade")
    p.add_argument("--prepare-only", action="store_true", help="unpack, list the submissions (DIR/queue.txt) "
                   "and write the options (DIR/options.json) without grading: for a batch engine (Slurm recipe)")
    p.set_defaults(func=_grade_class)

    p = command("grade-index", "(instructor) grade one student of a prepared class by its queue index: "
                "one task of a batch array (grading/slurm/grade_array.sbatch)", instructor_only=True)
    p.add_argument("dir", help="the --out folder of grade-class --prepare-only")
    p.add_argument("index", nargs="?", type=int, default=None,
                   help="line INDEX+1 of DIR/queue.txt (default: $SLURM_ARRAY_TASK_ID)")
    p.set_defaults(func=_grade_index)

    p = command("class-report", "(instructor) merge DIR's per-student results.json into grades.csv "
                "and report.html", instructor_only=True)
    p.add_argument("dir", help="the --out folder of grade-class (or of a batch job array)")
    p.add_argument("--partial", action="store_true", help="merge even while students are not graded yet "
                   "(listed as missing); without it the merge refuses and prints the line that grades them")
    p.add_argument("--allow-mixed", action="store_true", help="merge grades made with other options or by "
                   "another grader version than the rest (refused without it)")
    p.set_defaults(func=_class_report)

    p = command("notebook", "(instructor) sync, check or re-run notebooks (notebooks/README.md)",
                instructor_only=True)
    p.add_argument("action", choices=["sync", "run", "check"],
                   help="sync a pair and strip noise | re-run one notebook and store its checked outputs | report problems")
    p.add_argument("notebooks", nargs="*", metavar="NN", help="e.g. 06 (default: every notebook; run needs one)")
    p.add_argument("--impl", default="solutions", help="implementation `run` executes (default: solutions)")
    p.set_defaults(func=_notebook)

    p = command("link", "(instructor) print the nbgitpuller link that puts the course in each "
                "student's JupyterHub home", instructor_only=True)
    p.add_argument("--hub", required=True, metavar="URL", help="the JupyterHub, e.g. https://hub.example.edu")
    p.add_argument("--repo", required=True, metavar="URL", help="the student edition's git repository")
    p.add_argument("--branch", default=None, help="branch to pull (default: the repository's default)")
    p.add_argument("--path", default=None, help="file to open after pulling (default: notebooks/00_welcome.ipynb)")
    p.set_defaults(func=_link)

    if not instructor:
        sub.metavar = "{" + ",".join(n for n in sub.choices if n not in INSTRUCTOR_ONLY) + "}"
    args = parser.parse_args(argv)
    return args.func(args)
