"""How does `pagedlab class-report` (the merge after a Slurm array) grow with the class?

The generated test class (tests/submissions/classroom.py, 9 kinds of submission) is graded once
with grade-class (Tasks 11 and 12, public checks: the merge reads results, whatever they hold),
then copied into classes of N students (each kind N/9 times, each copy its own key, queue and
state, as an array would leave them) and merged, timing each merge. The similarity report
compares every pair of students sharing code, so copies of 9 submissions are close to its worst
case. Each size's CPU time is printed with its ratio to the smallest size's, measured in the same
run (a ratio near 2 per doubling is linear, near 4 quadratic).

    .venv/bin/python benchmarks/bench_class_merge.py [--sizes 90,180,360]

grading/README.md's plan for 1,000 students quotes it (16, 40 and 115 CPU-s for 180, 360 and
720 students on the shared 2-core machine, 4 Dec).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "submissions"))

import classroom as fake_class  # noqa: E402

from pagedlab.grader import class_queue, class_report  # noqa: E402


def graded_class(base: Path) -> Path:
    src, out = base / "in", base / "graded"
    fake_class.make_class(src)
    subprocess.run([sys.executable, "-m", "pagedlab", "grade-class", str(src), "--out", str(out), "--jobs", "2",
                    "--tasks", "11,12", "--no-hidden"], check=True, capture_output=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out


def copies(graded: Path, out: Path, n: int) -> None:
    """A class of n: the graded students copied round-robin, each with its own key."""
    prepared = class_queue.read(graded)
    keys = []
    for i in range(n):
        base = prepared.keys[i % len(prepared.keys)]
        key = f"{base}-{i}"
        shutil.copytree(graded / "students" / base, out / "students" / key)
        state_path = out / "students" / key / "state.json"
        state_path.write_text(json.dumps(dict(json.loads(state_path.read_text()), key=key)))
        keys.append(key)
    opts = prepared.options
    class_queue.write(out, keys, [t.removeprefix("task") for t in opts["tasks"]], opts["hidden"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="90,180,360", help="class sizes to merge, comma-separated")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-class-merge-") as tmp:
        graded = graded_class(Path(tmp))
        first = None
        for n in sizes:
            out = Path(tmp) / f"class-{n}"
            copies(graded, out, n)
            wall, cpu = time.perf_counter(), time.process_time()
            code = class_report.build(out, echo=lambda *a: None)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            assert code == 0, f"the merge of {n} refused"
            pairs = len(json.loads((out / "similarity.json").read_text()))
            first = first or cpu
            print(f"{n:5d} students: {cpu:6.1f} CPU-s, {wall:6.1f} s on the clock, {pairs:6d} pairs sharing code, "
                  f"{cpu / first:4.1f}x the {sizes[0]}-student merge", flush=True)
            shutil.rmtree(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
