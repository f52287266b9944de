"""`pagedlab` command line: assign, doctor, grade, link."""

from __future__ import annotations

import argparse
import sys


def _assign(args) -> int:
    from . import assign, course

    try:
        solutions = course.root() / "solutions"
    except course.NoCourseFolder as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not solutions.is_dir():
        # A student edition has no solutions/: nothing to generate from, and "up to date" would lie.
        print(f"error: {solutions} does not exist, so exercises/ cannot be generated or checked "
              "(assign is an instructor tool: run it in the instructor edition)", file=sys.stderr)
        return 2
    try:
        if args.check:
            problems = assign.stale()
            if problems:
                print("exercises/ is stale; run `pagedlab assign` to regenerate:", file=sys.stderr)
                for p in problems:
                    print(f"  {p}", file=sys.stderr)
                return 1
            print("exercises/ is up to date with solutions/")
            return 0
        changed = assign.write()
    except assign.AssignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in changed:
        print(f"wrote {path.relative_to(assign.course_root())}")
    if not changed:
        print("exercises/ already up to date")
    return 0


def _doctor(args) -> int:
    from . import doctor

    return doctor.main()


def _grade(args) -> int:
    from .grading import cli as grade_cli

    return grade_cli.main(args)


def _link(args) -> int:
    from .deploy import nbgitpuller_link

    try:
        print(nbgitpuller_link(args.hub, args.repo, branch=args.branch, path=args.path))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pagedlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("assign", help="regenerate exercises/ from solutions/")
    p.add_argument("--check", action="store_true", help="fail (exit 1) if exercises/ is stale")
    p.set_defaults(func=_assign)

    p = sub.add_parser("doctor", help="what the course needs and what this machine has")
    p.set_defaults(func=_doctor)

    p = sub.add_parser("grade", help="run the graded checks task by task and score them")
    p.add_argument("--impl", default=None, help="exercises, solutions or a submission folder")
    p.add_argument("--json", default=None, metavar="PATH", help="write Gradescope results.json here")
    p.add_argument("--notebooks", action="store_true", help="also run nbval over each notebook")
    p.add_argument("--gradescope", action="store_true", help="read /autograder/submission, write /autograder/results/results.json")
    p.add_argument("--tasks", default=None, metavar="LIST", help="only these tasks, e.g. task1,task3 or 1,3")
    p.add_argument("--hidden", default=None, metavar="DIR", help="folder of hidden checks (default: grading/hidden/ when present)")
    p.add_argument("--no-hidden", action="store_true", help="public checks only")
    p.set_defaults(func=_grade)

    p = sub.add_parser("link", help="print the nbgitpuller link that puts the course in each student's home")
    p.add_argument("--hub", required=True, metavar="URL", help="the JupyterHub, e.g. https://hub.example.edu")
    p.add_argument("--repo", required=True, metavar="URL", help="the student edition's git repository")
    p.add_argument("--branch", default=None, help="branch to pull (default: the repository's default)")
    p.add_argument("--path", default=None, help="file to open after pulling (default: notebooks/00_welcome.ipynb)")
    p.set_defaults(func=_link)

    args = parser.parse_args(argv)
    return args.func(args)
