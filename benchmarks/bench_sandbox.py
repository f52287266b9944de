"""What does the sandbox cost an honest submission? Grading time under a sandbox user vs none.

The reference solution is graded as a submission (`pagedlab grade --impl COPY`) alternately
without a sandbox user (the baseline: the child runs as the grader) and with one (the child as
the user, in a PID namespace where the machine allows it, the record through root's descriptors,
the verified kill sweep after every child). Both runs must give full marks. Target: <= 1.2x.

    sudo .venv/bin/python benchmarks/bench_sandbox.py [--tasks 1,2,6,10,11] [--rounds 3] [--user NAME]

Needs root (it creates the user, `pagedlab-bench-sandbox`, unless --user names one).
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
sys.path.insert(0, str(ROOT / "tests"))
from sandbox_users import ensure_user  # noqa: E402

FILES = ("memory_manager.py", "paged_attention.py", "prefix_cache.py", "buddy.py", "swap.py",
         "paged_attention.cu", "paged_attention_v2.cu")
TARGET = 1.2


def grade_seconds(sub: Path, tasks: str, user: str | None) -> tuple[float, float, float]:
    """(wall seconds, score, max score) of one grade of `sub`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PAGEDLAB_GRADE_USER", None)
    if user:
        env["PAGEDLAB_GRADE_USER"] = user
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        # Both start with a cold kernel cache: the sandbox gives each grading job its own.
        env["PAGEDLAB_CACHE"] = str(Path(tmp) / "cache")
        out = Path(tmp) / "results.json"
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pagedlab", "grade", "--impl", str(sub), "--json", str(out),
                        "--tasks", tasks, "--no-hidden"], env=env, check=True, capture_output=True, cwd=ROOT)
        seconds = time.perf_counter() - began
        results = json.loads(out.read_text())
    return seconds, results["score"], sum(t["max_score"] for t in results["tests"])


def child_seconds(user: str | None, n: int = 8) -> float:
    """Median seconds of one limited child that does nothing (the sandbox's fixed cost per child:
    workspace, PID namespace, descriptors, kill sweep), run in this process."""
    from pagedlab.sandbox import process, users

    sandbox = users._lookup(user) if user else None
    times = []
    for _ in range(n):
        began = time.perf_counter()
        policy = process.Policy(timeout=60, memory_bytes=4 * 2**30, sandbox=sandbox, record_cap=1024)
        process.run_limited([sys.executable, "-c", "pass"], policy, env=dict(os.environ))
        times.append(time.perf_counter() - began)
    return sorted(times)[n // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="1,2,6,10,11")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--user", default="pagedlab-bench-sandbox")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: the sandboxed run switches to an unprivileged user", file=sys.stderr)
        return 2
    ensure_user(args.user)
    times: dict[str, list[float]] = {"no sandbox": [], "sandbox": []}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-sub-") as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        for name in FILES:
            shutil.copy(ROOT / "solutions" / name, sub / name)
        Path(tmp).chmod(0o755)
        for _ in range(args.rounds):  # alternate, so drift in the machine's load hits both alike
            for label, user in (("no sandbox", None), ("sandbox", args.user)):
                seconds, score, best = grade_seconds(sub, args.tasks, user)
                if score != best:
                    print(f"{label}: the reference scored {score}/{best}: not the same work", file=sys.stderr)
                    return 1
                times[label].append(seconds)
    sys.path.insert(0, str(ROOT))
    bare, boxed_child = child_seconds(None), child_seconds(args.user)
    print(f"one empty child: {bare:.3f} s without, {boxed_child:.3f} s with the sandbox "
          f"(+{boxed_child - bare:.3f} s per child)")
    base, boxed = min(times["no sandbox"]), min(times["sandbox"])
    print(f"tasks {args.tasks}, best of {args.rounds}, {os.cpu_count()} cores")
    for label, values in times.items():
        print(f"  {label:<10}: " + "  ".join(f"{v:5.1f}s" for v in values))
    ratio = boxed / base
    print(f"sandbox / no sandbox: {ratio:.2f}x (target <= {TARGET}x): {'OK' if ratio <= TARGET else 'OVER'}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
