"""Does a loaded machine change an honest score? The same submission graded N times under load.

The reference solution is graded as a submission (`pagedlab grade --impl COPY`, hidden checks on,
a sandbox user, every answer path root-only as `grading/setup.sh` leaves them) `--runs` times while `--spinners` processes of another user burn CPU (other grading on the same machine).
Time limits count CPU time, so every run must give the same, full score. With `--time-scale`
below 1 each task's limit shrinks to a few times the CPU the task needs: a wall-clock limit would
then be hit under the load, so the benchmark shows the CPU-time limit doing its job.

    sudo .venv/bin/python benchmarks/bench_loaded_regrade.py [--runs 10] [--spinners 6]
        [--tasks 1,6,10] [--time-scale 0.3]

Prints each run's score, wall and CPU seconds, and the wall/CPU ratio (how much the load
stretched the clock). Needs root (it creates `pagedlab-bench-load` and `pagedlab-bench-spin`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))
from sandbox_users import ensure_user, interpreter_reachable  # noqa: E402

from pagedlab.sandbox import private  # noqa: E402

SPIN = "while True:\n    pass\n"


@contextlib.contextmanager
def sealed_answers():
    """Every answer path root-only while the block runs, as grading/setup.sh leaves them."""
    before = private.seal(ROOT)
    try:
        yield
    finally:
        private.unseal(before)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grade_once(sub: Path, args, user: str) -> tuple[float, float, float, float]:
    """(score, max score, wall seconds, CPU seconds of the grade and its children) of one run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PAGEDLAB_GRADE_USER": user,
           "PAGEDLAB_GRADE_TIME_SCALE": str(args.time_scale)}
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        out = Path(tmp) / "results.json"
        cmd = [sys.executable, "-m", "pagedlab", "grade", "--impl", str(sub), "--json", str(out)]
        if args.tasks:
            cmd += ["--tasks", args.tasks]
        if args.no_hidden:
            cmd.append("--no-hidden")
        cpu, began = children_cpu(), time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        wall, cpu = time.perf_counter() - began, children_cpu() - cpu
        if not out.is_file():
            sys.exit(f"the grade wrote no results.json:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        results = json.loads(out.read_text())
        if results["score"] != sum(t["max_score"] for t in results["tests"]):
            for test in results["tests"]:  # a failed task, and its hidden checks' unmasked details
                if test["score"] != test["max_score"] or test["status"] == "failed":
                    print(f"    {test['name']}: {test['score']}/{test['max_score']}\n{test['output'][-3000:]}")
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(out, args.keep / f"results-{time.strftime('%H%M%S')}.json")
    return results["score"], sum(t["max_score"] for t in results["tests"]), wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--spinners", type=int, default=6)
    parser.add_argument("--tasks", default="1,6,10", help="comma list; empty for every task")
    parser.add_argument("--time-scale", type=float, default=0.3)
    parser.add_argument("--no-hidden", action="store_true")
    parser.add_argument("--keep", type=Path, help="copy the results.json of every run short of full marks here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: the grade switches to a sandbox user and the load runs as another", file=sys.stderr)
        return 2
    user, spinner = ensure_user("pagedlab-bench-load"), ensure_user("pagedlab-bench-spin")
    with tempfile.TemporaryDirectory(prefix="bench-load-sub-") as tmp, interpreter_reachable(), sealed_answers():
        sub = Path(tmp) / "submission"
        shutil.copytree(ROOT / "solutions", sub, ignore=shutil.ignore_patterns("__pycache__"))
        Path(tmp).chmod(0o755)
        load = [subprocess.Popen([sys.executable, "-c", SPIN], user=spinner.pw_uid, group=spinner.pw_gid,
                                 extra_groups=[], cwd="/", env={"PATH": os.defpath})
                for _ in range(args.spinners)]
        rows = []
        try:
            for run in range(args.runs):
                score, best, wall, cpu = grade_once(sub, args, user.pw_name)
                rows.append((score, best, wall, cpu))
                print(f"run {run + 1:2}: {score:g}/{best:g}  wall {wall:6.1f} s  CPU {cpu:6.1f} s  "
                      f"wall/CPU {wall / max(cpu, 1e-9):4.1f}", flush=True)
        finally:
            for proc in load:
                proc.kill()
                proc.wait()
    scores = sorted({(r[0], r[1]) for r in rows})
    print(f"{args.runs} runs, tasks {args.tasks or 'all'}, time scale {args.time_scale}, "
          f"{args.spinners} spinners of another user, {os.cpu_count()} cores: scores {scores}")
    same = len(scores) == 1 and scores[0][0] == scores[0][1]
    print("one score, full marks: OK" if same else "the score moved with the load: FAIL")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
