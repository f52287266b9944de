"""A check server for the mutation suites: the graded checks' drivers and judge, imported once.

Grading a folder through `pagedlab.checks.results` starts a fresh interpreter per task, which
imports numpy, the check modules and (Tasks 6-9) torch again: that start is most of what a
planted bug costs to test. A mutation test asks only whether the checks catch the bug, so this
server imports all of that once and runs each folder's drivers in a forked child of itself. A
segfault or a hang in a mutant ends that child only: the check it died in fails, and the checks
after it run in a fresh fork. Verdicts are the real judge's, given in the server, where no mutant
code ever ran, against the same trusted records as the real grader (expected.json, the check's
computed expectation, or for a hidden check the reference solution driven in a fork on the same
scenario). Hidden checks are planned as the grader plans them (`runner.plan_for`: a grading's
seed, one more per hidden check), and a request may leave the public checks out, to show that
the hidden set catches a bug on its own. What this skips is the sandbox around the child (limits, users,
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
HIDDEN = ROOT / "grading" / "hidden"


def _plan(task: str, hidden_seed: int | None = None, public: bool = True) -> list:
    """[(check, seed, engines)] of `task` in the real grader's order and seeds (`runner.plan_for`):
    its public checks (seed 0) unless `public` is False, then, with a `hidden_seed`, its hidden
    ones; `engines` are the empty engines' bytes the grader sends with the request."""
    key = (task, hidden_seed, public)
    if key not in _plans:
        from pagedlab.grader.pipeline import plan_for, requests_for
        from pagedlab.spec import manifest

        checks, plan = plan_for(manifest.task(task), hidden=hidden_seed is not None, hidden_seed=hidden_seed,
                                hidden_from=HIDDEN)
        # the empty engines' bytes the grader sends with each request (the child writes none)
        _plans[key] = [(c, seed, request["engines"])
                       for c, (_, seed), request in zip(checks, plan, requests_for(checks, plan), strict=True)
                       if public or c.hidden]
    return _plans[key]


_trusted: dict = {}


def _trusted_record(c, seed: int, engines):
    """What the grader judges `c` against: a computed expectation, a committed record, or (a
    hidden check) the reference solution's record of the same scenario, driven in a fork."""
    key = (c.key, seed)
    if key not in _trusted:
        if c.hidden and c.expected is None:
            records, problems = _drive_all("solutions", [(c, seed, engines)])
            if 0 not in records:
                raise RuntimeError(f"the reference failed on {c.key} (seed {seed}): {problems}")
            _trusted[key] = records[0]
        else:
            from trusted_records import trusted_record

            _trusted[key] = trusted_record(c, seed)
    return _trusted[key]


def _drive_in_fork(folder: str, checks: list, start: int, out: int) -> None:
    """The forked child: run checks[start:] ((check, seed, engines)) on `folder`, one begin and one
    record line each."""
    from pagedlab.drivers import record
    from pagedlab.guard import audit

    devnull = os.open(os.devnull, os.O_WRONLY)  # a mutant's prints must not reach the protocol
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.environ["PAGEDLAB_IMPL"] = folder
    from pagedlab.engine import ctrack

    ctrack.use_runner_for(folder)  # a C library runs in its runner, as in the real child
    audit.install(folder)  # the student-API guard, as in the real child
    for index in range(start, len(checks)):
        os.write(out, (json.dumps({"begin": index}) + "\n").encode())
        c, seed, engines = checks[index]
        stream = record.drive(c, folder, seed, engines=engines)
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
                from pagedlab.drivers.record import Stream

                records[event["index"]] = Stream.from_json(event["record"])
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return current, f"crashed with {signal.Signals(os.WTERMSIG(status)).name}"
    if os.WEXITSTATUS(status) != 0:
        return current, f"exited with code {os.WEXITSTATUS(status)}"
    return current, ""


def _drive_all(folder: str, checks: list) -> tuple[dict, dict]:
    """({index: record}, {index: why the fork died there}) of (check, seed, engines) on `folder`, a
    fresh fork after each crash or hang."""
    records, problems, start = {}, {}, 0
    while start < len(checks):
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                _drive_in_fork(folder, checks, start, write_end)
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
    return records, problems


def grade(folder: str, tasks: list[str], hidden_seed: int | None = None, public: bool = True) -> list[list]:
    """[[task, check name, hidden, passed, message]] for the checks of `tasks` on `folder`, judged
    as the real grader does (runner.run_task, messages and causes included): the public ones
    unless `public` is False, and with a `hidden_seed` the hidden ones, each under the seed the
    real grader would give it."""
    from pagedlab.grader.causes import refer_to_causes
    from pagedlab.grader.judge import judge, refer_to_first_report
    from pagedlab.grader.pipeline import CheckOutcome

    planned = [(task, c, seed, engines) for task in tasks for c, seed, engines in _plan(task, hidden_seed, public)]
    records, problems = _drive_all(folder, [(c, seed, engines) for _, c, seed, engines in planned])
    answer, shown = [], {}
    for task in tasks:
        mine, hidden = [], []
        for index, (of, c, seed, engines) in enumerate(planned):
            if of == task:
                verdict = judge(_trusted_record(c, seed, engines), records.get(index), problem=problems.get(index, ""),
                                rule=c.rule)
                mine.append(CheckOutcome(c.name, verdict.passed, verdict.message, cause=verdict.cause))
                hidden.append(c.hidden)
        refer_to_first_report(mine)
        refer_to_causes(mine, {c.name: c.follows for of, c, *_ in planned if of == task}, shown=shown, label=task)
        answer += [[task, o.name, h, o.passed, o.message] for o, h in zip(mine, hidden, strict=True)]
    return answer


def serve(with_torch: bool) -> None:
    if with_torch:
        import torch  # imported once here instead of once per mutant

        # One thread: an OpenMP pool made in the server would not survive a fork.
        torch.set_num_threads(1)
    for line in sys.stdin:
        request = json.loads(line)
        graded = grade(request["folder"], request["tasks"], request.get("hidden_seed"), request.get("public", True))
        sys.stdout.write(json.dumps(graded) + "\n")
        sys.stdout.flush()


# --- the pytest side ------------------------------------------------------------------------------
class CheckServer:
    """One server process; `grade` sends a folder and returns {(task, check name): (passed, message)}."""

    def __init__(self, *, torch: bool = False, env: dict | None = None):
        env = dict(os.environ, OMP_NUM_THREADS="1", PAGEDLAB_IMPL="solutions", **(env or {}))
        self.proc = subprocess.Popen([sys.executable, __file__, *(["--torch"] if torch else [])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT, env=env)

    def grade(self, folder: Path, tasks: list[str]) -> dict:
        """{(task, check name): (passed, message)} of the public checks of `tasks`."""
        return {(task, name): (passed, message) for task, name, _, passed, message in self.checks(folder, tasks)}

    def checks(self, folder: Path, tasks: list[str], hidden_seed: int | None = None, public: bool = True) -> list:
        """[(task, check name, hidden, passed, message)] as the grader would judge them (`grade` above)."""
        request = {"folder": str(folder), "tasks": tasks, "hidden_seed": hidden_seed, "public": public}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the check server died (exit {self.proc.wait()}); its stderr is above")
        return [tuple(row) for row in json.loads(line)]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


if __name__ == "__main__":
    serve("--torch" in sys.argv[1:])
