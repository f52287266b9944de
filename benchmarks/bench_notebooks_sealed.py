"""Every notebook on the reference, as Gradescope runs them: `GRADE_NOTEBOOKS=1 run_autograder`.

The Gradescope image is built in a temporary root (the package's zip, `grading/setup.sh`: a
created sandbox user, the venv, every answer sealed root-only), then the reference solutions are
uploaded and graded with `--notebooks`: every task, then all twelve notebooks as the sandbox user,
their graded cells reading root's verdicts and their demos root's judge. Every notebook must pass.
CI runs two of them (tests/test_autograder_package.py); this is the whole run, on demand, too
slow for CI (about 100 s of wall time and 90 CPU-s on an idle 2-core machine, the image aside).

    sudo flock /tmp/pagedlab-users.lock .venv/bin/python benchmarks/bench_notebooks_sealed.py \\
        [--tasks 9,12] [--bytecode] [--plant FILE:OLD:NEW]

Prints each notebook's outcome and seconds, the grade's wall time and the CPU seconds of the run
(run_autograder and everything it started); exits 1 when a notebook fails (or, with --plant,
when none does). `--bytecode` builds the image as Gradescope's is (bytecode compiled at set-up:
about a minute more there, less CPU per notebook after).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))
from autograder_image import run_autograder, solutions, temporary_image  # noqa: E402

USER = "pagedlab-bench-notebooks"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="", help="e.g. 9,12: the notebooks of those tasks only")
    parser.add_argument("--bytecode", action="store_true", help="compile the venv's bytecode at set-up, as Gradescope's image")
    parser.add_argument("--plant", default="", metavar="FILE:OLD:NEW",
                        help="replace OLD by NEW in the reference's FILE (a planted bug: some notebook must fail)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: it runs grading/setup.sh and creates a sandbox user", file=sys.stderr)
        return 2
    began = time.perf_counter()
    with temporary_image("1", user=USER, bytecode=args.bytecode) as (autograder, env):
        built = time.perf_counter() - began
        print(f"image built in {built:.0f} s (setup.sh, every answer sealed)")
        replace = {}
        if args.plant:
            name, old, new = args.plant.split(":", 2)
            replace[name] = (old.encode().decode("unicode_escape"), new.encode().decode("unicode_escape"))
        cpu0, wall0 = children_cpu(), time.perf_counter()
        extra = ("--tasks", args.tasks) if args.tasks else ()
        results, done = run_autograder(autograder, env, solutions(replace), *extra, notebooks=True)
        cpu, wall = children_cpu() - cpu0, time.perf_counter() - wall0
    notebooks = [t for t in results["tests"] if t["name"].startswith("Notebook ")]
    for t in notebooks:
        print(f"{'✓' if t['status'] == 'passed' else '✗'} {t['name'].split()[1]:<45} "
              f"{t['output'].splitlines()[0] if t['status'] != 'passed' else ''}")
    tasks = [t for t in results["tests"] if t.get("number", "").isdigit()]
    print(f"tasks {results['score']:g}/{sum(t['max_score'] for t in tasks):g}; {len(notebooks)} notebooks, "
          f"{sum(t['status'] == 'passed' for t in notebooks)} passed; run_autograder {wall:.0f} s wall, "
          f"{cpu:.0f} CPU-s")
    if not notebooks:
        print(done.stdout[-3000:], done.stderr[-3000:])
        return 1
    failed = [t for t in notebooks if t["status"] != "passed"]
    return int(bool(failed) != bool(args.plant))


if __name__ == "__main__":
    raise SystemExit(main())
