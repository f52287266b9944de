"""A check server for the mutation suites: the graded checks' drivers and judge, imported once.

Grading a folder through `pagedlab.checks.results` starts a fresh interpreter per task, which
imports numpy, the check modules and (Tasks 6-9) torch again: that start is most of what a
planted bug costs to test. A mutation test asks only whether the checks catch the bug, so this
server imports all of that once and runs each folder's drivers in a forked child of itself. A
segfault or a hang in a mutant ends that child only: the check it died in fails, and the checks
after it run in a fresh fork. Verdicts are the real judge's, given in the server, where no mutant
code ever ran, against the same trusted records as the real grader (expected.json, or the
check's computed expectation). What this skips is the sandbox around the child (limits, users,
the record file); that path is graded end to end by tests/test_grading_real.py, and each module
using the server also compares one mutant's verdicts with the real runner's.

    python tests/forked_checks.py [--torch]   # one JSON request per stdin line, one JSON answer per line
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Seconds a check may run without finishing before its fork is killed (a mutant's endless loop).
HANG_S = 60.0


# --- the server ---------------------------------------------------------------------------------
_plans: dict = {}


def _plan(task: str) -> list:
    """[(check, trusted record, its request)] of `task`'s public checks, in the real grader's
    order; the request holds the empty engines' bytes the grader sends (the child writes none)."""
    if task not in _plans:
        from trusted_records import trusted_record

        from pagedlab import manifest
        from pagedlab.sandbox.runner import plan_for, requests_for

        checks, plan = plan_for(manifest.task(task), hidden=False)
        _plans[task] = [(c, trusted_record(c), request)
                        for c, request in zip(checks, requests_for(checks, plan), strict=True)]
    return _plans[task]


def _drive_in_fork(folder: str, checks: list, requests: list, start: int, out: int) -> None:
    """The forked child: run checks[start:] on `folder`, one begin and one record line each."""
    from pagedlab.checks import framework
    from pagedlab.guard import audit

    devnull = os.open(os.devnull, os.O_WRONLY)  # a mutant's prints must not reach the protocol
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.environ["PAGEDLAB_IMPL"] = folder
    from pagedlab import ctrack

    ctrack.use_runner_for(folder)  # a C library runs in its runner, as in the real child
    audit.install(folder)  # the student-API guard, as in the real child
    for index in range(start, len(checks)):
        os.write(out, (json.dumps({"begin": index}) + "\n").encode())
        stream = framework.drive(checks[index], folder, 0, engines=requests[index]["engines"])
        os.write(out, (json.dumps({"index": index, "record": stream.to_json()}) + "\n").encode())
    os._exit(0)  # no teardown: a mutant's broken heap must not turn a finished run into a crash


def _read_fork(pid: int, fd: int, start: int, records: dict) -> tuple[int, str]:
    """Collect the fork's records; (the check it was in when it ended, why it ended early or "")."""
    current, pending, deadline = start, b"", time.monotonic() + HANG_S
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return current, f"timeout: no result within {HANG_S:.0f} s"
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            event = json.loads(line)
            if "begin" in event:
                current, deadline = event["begin"], time.monotonic() + HANG_S
            else:
                from pagedlab.checks.framework import Stream

                records[event["index"]] = Stream.from_json(event["record"])
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return current, f"crashed with {signal.Signals(os.WTERMSIG(status)).name}"
    if os.WEXITSTATUS(status) != 0:
        return current, f"exited with code {os.WEXITSTATUS(status)}"
    return current, ""


def grade(folder: str, tasks: list[str]) -> list[list]:
    """[[task, check name, passed, message]] for every public check of `tasks` on `folder`."""
    from pagedlab.checks.judge import judge

    planned = [(task, c, want, request) for task in tasks for c, want, request in _plan(task)]
    checks, requests = [c for _, c, _, _ in planned], [r for *_, r in planned]
    records, problems, start = {}, {}, 0
    while start < len(checks):
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                _drive_in_fork(folder, checks, requests, start, write_end)
            finally:
                os._exit(70)
        os.close(write_end)
        try:
            current, problem = _read_fork(pid, read_end, start, records)
        finally:
            os.close(read_end)
        if problem and current not in records:
            problems[current] = problem
        start = current + 1
    answer = []
    for index, (task, c, want, _) in enumerate(planned):
        verdict = judge(want, records.get(index), problem=problems.get(index, ""))
        answer.append([task, c.name, verdict.passed, verdict.message])
    return answer


def serve(with_torch: bool) -> None:
    if with_torch:
        import torch  # imported once here instead of once per mutant

        # One thread: an OpenMP pool made in the server would not survive a fork.
        torch.set_num_threads(1)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.write(json.dumps(grade(request["folder"], request["tasks"])) + "\n")
        sys.stdout.flush()


# --- the pytest side ------------------------------------------------------------------------------
class CheckServer:
    """One server process; `grade` sends a folder and returns {(task, check name): (passed, message)}."""

    def __init__(self, *, torch: bool = False, env: dict | None = None):
        env = dict(os.environ, OMP_NUM_THREADS="1", PAGEDLAB_IMPL="solutions", **(env or {}))
        self.proc = subprocess.Popen([sys.executable, __file__, *(["--torch"] if torch else [])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT, env=env)

    def grade(self, folder: Path, tasks: list[str]) -> dict:
        self.proc.stdin.write(json.dumps({"folder": str(folder), "tasks": tasks}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the check server died (exit {self.proc.wait()}); its stderr is above")
        return {(task, name): (passed, message) for task, name, passed, message in json.loads(line)}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


if __name__ == "__main__":
    serve("--torch" in sys.argv[1:])
