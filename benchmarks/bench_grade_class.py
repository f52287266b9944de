"""How many submissions per minute does `pagedlab grade-class` grade, one at a time and N at a time?

The generated test class (tests/submissions/classroom.py: solution, stubs, a mutant per Part, a
crash, a hang, a cheat, two copies) is graded from scratch with `--jobs 1` and then `--jobs N`
(default 2), each into a fresh folder, and the ratio printed. Both runs must produce the same
grades.csv (the run aborts otherwise), so the ratio compares the same work.

    .venv/bin/python benchmarks/bench_grade_class.py [--jobs 2] [--tasks 1,6,10,11,13] [--hidden]

Every grading is a subprocess (`python -m pagedlab grade`), so --jobs N can use N cores; on a
2-core machine shared with other work the ratio stays under 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "submissions"))

import classroom as fake_class  # noqa: E402


def grade_class(src: Path, out: Path, jobs: int, tasks: str, hidden: bool) -> float:
    cmd = [sys.executable, "-m", "pagedlab", "grade-class", str(src), "--out", str(out), "--jobs", str(jobs),
           "--tasks", tasks] + ([] if hidden else ["--no-hidden"])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PAGEDLAB_GRADE_TIME_SCALE": os.environ.get(
        "PAGEDLAB_GRADE_TIME_SCALE", "0.3")}  # the hang costs 0.3 x its task's limit
    began = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tasks", default=",".join(fake_class.TASKS))
    parser.add_argument("--hidden", action="store_true", help="also run the hidden checks")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-grade-class-") as tmp:
        src = Path(tmp) / "class"
        n = len(fake_class.make_class(src))
        times, grades = {}, {}
        for jobs in (1, args.jobs):
            out = Path(tmp) / f"out-{jobs}"
            times[jobs] = grade_class(src, out, jobs, args.tasks, args.hidden)
            grades[jobs] = (out / "grades.csv").read_text()
        if grades[1] != grades[args.jobs]:
            print("grades.csv differs between the runs: not the same work", file=sys.stderr)
            return 1
    print(f"{n} submissions, tasks {args.tasks}, {'with' if args.hidden else 'without'} hidden checks, "
          f"{os.cpu_count()} cores")
    for jobs, seconds in times.items():
        print(f"  --jobs {jobs}: {seconds:6.1f} s  {n / seconds * 60:5.1f} submissions/minute")
    print(f"  speed-up --jobs {args.jobs} / --jobs 1: {times[1] / times[args.jobs]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
