"""The C track next to the Python engine: compile time, and the graded checks' driver time.

Compile: a cold build of solutions/llm_memory.c (student file + pagedlab's runtime, linked) in a
fresh cache, then a cached load. Checks: every Task 1-5 driver run in this process (no child
process, no judge) on the C reference and on the Python reference; the ratio is C / Python,
measured in the same run. C calls cross ctypes and each malloc/free calls back into cmem's
Python ledger, so the point is not speed but that grading C costs about what grading Python does.

    .venv/bin/python benchmarks/bench_c_track.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pagedlab.drivers import record  # noqa: E402
from pagedlab.engine import ctrack  # noqa: E402
from pagedlab.grader import registry  # noqa: E402

TASKS = ("task1", "task2", "task3", "task4", "task5")


def drive_all(impl: str) -> float:
    began = time.perf_counter()
    for task in TASKS:
        for c in registry.checks_of(task):
            stream = record.drive(c, impl, 0)
            if stream.status != "completed":
                raise SystemExit(f"{impl}: {c.key} did not complete: {stream.status} {stream.error}")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as sub:
        os.environ["PAGEDLAB_CACHE"] = cache
        shutil.copy(ROOT / "solutions" / "llm_memory.c", Path(sub) / "llm_memory.c")
        began = time.perf_counter()
        cold = ctrack.build(Path(sub) / "llm_memory.c")
        cold_wall = time.perf_counter() - began
        began = time.perf_counter()
        ctrack.load(Path(sub) / "llm_memory.c")
        cached = time.perf_counter() - began
        print(f"compile (cold, {ctrack.find_compiler()}): {cold.seconds:.3f} s build, {cold_wall:.3f} s wall")
        print(f"load from the cache:        {cached * 1e3:.1f} ms")
        py = min(drive_all("solutions") for _ in range(args.repeat))
        c = min(drive_all(sub) for _ in range(args.repeat))
        n = sum(len(registry.checks_of(t)) for t in TASKS)
        print(f"{n} Task 1-5 drivers, best of {args.repeat}:")
        print(f"  Python engine (solutions/memory_manager.py): {py:.3f} s")
        print(f"  C engine      (solutions/llm_memory.c):      {c:.3f} s   ratio C/Python {c / py:.2f}")


if __name__ == "__main__":
    main()
