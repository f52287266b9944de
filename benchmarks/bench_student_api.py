"""What the student-API guard costs: the public checks of the Python tasks driven on solutions/
in a fresh process with the guard installed (as the checks' child does) and in one without it,
measured in the same run. Prints both times and their ratio (the issue's budget: <= 1.2x).

    .venv/bin/python benchmarks/bench_student_api.py [--tasks task2,task4,task9,task11,task12] [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_DRIVE = textwrap.dedent('''
    import sys, time
    from pagedlab.drivers import record
    from pagedlab.grader import registry
    from pagedlab.guard import audit
    from pagedlab.loader import impl_dir
    tasks, guarded = sys.argv[1].split(","), sys.argv[2] == "1"
    checks = [c for t in tasks for c in registry.checks_of(t, hidden=False)]
    if guarded:
        audit.install(impl_dir("solutions"))
    began = time.perf_counter()
    for c in checks:
        stream = record.drive(c, "solutions", 0)
        assert stream.status == "completed", (c.key, stream.error)
    print(time.perf_counter() - began)
''')


def timed(tasks: str, guarded: bool) -> float:
    done = subprocess.run([sys.executable, "-c", _DRIVE, tasks, "1" if guarded else "0"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="task2,task4,task9,task11,task12")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    plain = min(timed(args.tasks, False) for _ in range(args.repeat))
    guarded = min(timed(args.tasks, True) for _ in range(args.repeat))
    print(f"public checks of {args.tasks} on solutions/: {plain:.2f} s without the guard, "
          f"{guarded:.2f} s with it: {guarded / plain:.2f}x")


if __name__ == "__main__":
    main()
