"""Run one graded task in its own process, with a time limit, and read back what happened.

The student's code runs in a child (`task_runner`) in a new process group: a segfault, an
infinite loop, `os._exit` or a runaway compiler kills that child only, and on timeout the whole
group is killed, so nothing the task started outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .points import GradedTask, feedback_only, memory_limit

try:
    import resource
except ImportError:  # not POSIX: no limits beyond the time limit
    resource = None

# Seconds between the child's own stack dump (faulthandler) and the parent's SIGKILL.
GRACE = 5.0
# A task's process may not write more than this to disk (runaway prints fill the log, not the
# disk); its address space is capped by points.memory_limit() (a runaway allocation becomes a
# MemoryError in the student's code instead of the OOM killer's choice of victim).
MAX_FILE_BYTES = 256 * 1024 * 1024
TAIL_CHARS = 3000
# The child imports this very pagedlab, installed or not.
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)


@dataclass
class CheckOutcome:
    name: str
    passed: bool | None  # None: never finished (the process died or hung inside it)
    message: str = ""
    seconds: float = 0.0
    scored: bool = True  # False: feedback only (points.FEEDBACK_ONLY)


@dataclass
class TaskOutcome:
    row: GradedTask
    checks: list[CheckOutcome] = field(default_factory=list)
    problem: str = ""  # why the task could not finish: crash, timeout, missing file, grader error
    grader_error: bool = False  # the problem is the autograder's, not the student's
    started: bool = False  # the child listed the task's checks
    finished: bool = False  # the child reported every check
    note: str = ""
    seconds: float = 0.0

    @property
    def task(self) -> str:
        return self.row.task

    @property
    def scored_checks(self) -> list[CheckOutcome]:
        return [c for c in self.checks if c.scored]

    @property
    def passed_checks(self) -> int:
        return sum(1 for c in self.scored_checks if c.passed)

    @property
    def passed(self) -> bool:
        """Every scored check ran and passed (a crash in a feedback-only check costs nothing
        unless scored checks after it never ran)."""
        scored = self.scored_checks
        return not self.grader_error and bool(scored) and all(c.passed is True for c in scored)

    @property
    def score(self) -> float:
        if self.passed:
            return float(self.row.points)
        scored = self.scored_checks
        if self.row.partial and scored and not self.grader_error:
            return round(self.row.points * self.passed_checks / len(scored), 2)
        return 0.0


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


_SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault: a read or write through a bad pointer/address",
    "SIGBUS": "bus error: a misaligned or unmapped memory access",
    "SIGABRT": "aborted: a C library or the runtime detected corrupted state (double free?)",
    "SIGFPE": "arithmetic error (integer division by zero?)",
    "SIGILL": "illegal instruction",
    "SIGKILL": "killed (out of memory, or the time limit)",
}


def _tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return ("…" if size > chars else "") + text.strip()


def _student_frames(dump: str, impl_dir: Path) -> str:
    """From a faulthandler dump, the lines that point into the submission (where it was)."""
    marks = (str(impl_dir), "pagedlab_impl")
    lines = [line.strip() for line in dump.splitlines() if any(m in line for m in marks)]
    return "\n".join(f"    {line}" for line in lines[:8])


_memory_limit_bytes = 0  # set by run_limited just before it forks


def _limit_child_resources() -> None:  # runs in the child between fork and exec: no imports here
    if resource is None:
        return
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        limit = int(_memory_limit_bytes)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# Run the student's code as this (unprivileged) user when the grader runs as root, as on
# Gradescope: the code can then neither edit the grader's checks for the tasks after it nor
# read what the instructor keeps private.
USER_ENV = "PAGEDLAB_GRADE_USER"


@dataclass(frozen=True)
class Sandbox:
    name: str
    uid: int
    gid: int

    def own(self, path: Path) -> None:
        os.chown(path, self.uid, self.gid)

    def kill_all(self) -> None:
        """SIGKILL every process of the user: a daemon that left the task's process group
        (setsid) must not live on into the next task, where it could tamper with its files."""
        # `kill -9 -1` run as the user signals all of the user's processes but itself.
        subprocess.run(["kill", "-9", "-1"], user=self.uid, group=self.gid, extra_groups=[],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)


def sandbox_user() -> Sandbox | None:
    """The user from PAGEDLAB_GRADE_USER, or None when it is unset."""
    name = os.environ.get(USER_ENV, "").strip()
    if not name:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"{USER_ENV}={name!r}: no such user (create it, e.g. `useradd -M {name}`)") from None
    if os.geteuid() != 0:
        raise ValueError(f"{USER_ENV}={name!r} needs the grader to run as root (it is uid {os.geteuid()})")
    return Sandbox(name, entry.pw_uid, entry.pw_gid)


def missing_files(row: GradedTask, impl_dir: Path) -> list[str]:
    return [name for name in row.files if not (impl_dir / name).is_file()]


@dataclass
class Finished:
    """How a limited child process ended."""

    returncode: int
    timed_out: bool
    output: str  # the tail of its merged stdout/stderr
    seconds: float


def run_limited(cmd: list[str], *, env: dict, timeout: float, cwd: Path, output_path: Path,
                sandbox: Sandbox | None = None, home: Path | None = None) -> Finished:
    """Run `cmd` in a new process group; after `timeout` s kill the whole group. With a
    `sandbox` it runs as that user, with `home` (a scratch folder handed to the user) as HOME."""
    global _memory_limit_bytes
    _memory_limit_bytes = memory_limit() * 2**30
    began = time.perf_counter()
    timed_out = False
    as_user = {}
    if sandbox is not None:
        as_user = {"user": sandbox.uid, "group": sandbox.gid, "extra_groups": []}
        home = home or cwd
        sandbox.own(home)
        env = {**env, "HOME": str(home), "MPLCONFIGDIR": str(home / ".matplotlib")}
    with open(output_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, preexec_fn=_limit_child_resources,
                                cwd=cwd, **as_user)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # Whatever happened, nothing the child started (compilers, workers) survives it.
            _kill_group(proc)
            proc.wait()
            if sandbox is not None:
                sandbox.kill_all()
    return Finished(proc.returncode, timed_out, _tail(output_path), round(time.perf_counter() - began, 2))


def run_task(row: GradedTask, impl: str, impl_dir: Path, *, env: dict | None = None,
             sandbox: Sandbox | None = None) -> TaskOutcome:
    """Grade `row` against `impl` (a name the loader accepts; `impl_dir` is its folder)."""
    outcome = TaskOutcome(row)
    missing = missing_files(row, impl_dir)
    if missing:
        outcome.problem = (f"{' and '.join(missing)} is missing from the submission ({impl_dir.name}/), "
                           f"and {row.title.split(' · ')[0]} needs it. Submit your exercises/ files "
                           f"under their original names.")
        return outcome

    limit = row.limit()
    child_env = dict(os.environ if env is None else env)
    child_env["PAGEDLAB_IMPL"] = impl
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, child_env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix=f"pagedlab-{row.task}-") as scratch:
        scratch = Path(scratch)
        events_path = scratch / "events.jsonl"
        events_path.touch()
        if sandbox is not None:
            sandbox.own(events_path)
        cmd = [sys.executable, "-m", "pagedlab.grading.task_runner", "--task", row.task,
               "--impl", impl, "--out", str(events_path), "--dump-after", f"{limit:.1f}"]
        end = run_limited(cmd, env=child_env, timeout=limit + GRACE, cwd=scratch,
                          output_path=scratch / "output.txt", sandbox=sandbox)
        _read_events(outcome, events_path)
    outcome.seconds = end.seconds
    timed_out = end.timed_out or (not outcome.finished and end.seconds >= limit)
    _explain_end(outcome, end.returncode, timed_out, limit, end.output, impl_dir)
    return outcome


def _read_events(outcome: TaskOutcome, path: Path) -> None:
    names: list[str] = []
    done: dict[int, CheckOutcome] = {}
    began = -1
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        kind = event.get("event")
        if kind == "grader_error":
            outcome.problem, outcome.grader_error = event["message"], True
        elif kind == "start":
            names = list(event["checks"])
            outcome.started = True
        elif kind == "begin":
            began = event["index"]
        elif kind == "result":
            done[event["index"]] = CheckOutcome(event["name"], bool(event["passed"]),
                                                event.get("message", ""), event.get("seconds", 0.0))
        elif kind == "done":
            outcome.finished = True
    for index, name in enumerate(names):
        if index in done:
            outcome.checks.append(done[index])
        elif index == began:
            outcome.checks.append(CheckOutcome(name, None))  # the check the process died in
        else:
            outcome.checks.append(CheckOutcome(name, None, "not run: the task stopped before this check"))
    for c in outcome.checks:
        c.scored = not feedback_only(outcome.task, c.name)


def _explain_end(outcome: TaskOutcome, returncode: int, timed_out: bool, limit: float,
                 output: str, impl_dir: Path) -> None:
    if not outcome.started and not outcome.grader_error:
        # No student code runs before the checks are listed: dying here is the grader's fault.
        outcome.grader_error = True
        outcome.problem = "the task process ended before its checks started"
        if timed_out:
            outcome.problem += f" (timed out after {limit:.0f} s)"
        elif returncode < 0:
            outcome.problem += f" ({_signal_name(returncode)})"
        else:
            outcome.problem += f" (exit code {returncode})"
        if output:
            outcome.problem += ":\n" + "\n".join(f"    {line}" for line in output.splitlines()[-12:])
    if outcome.grader_error:
        outcome.problem = f"autograder problem, not your code (tell your instructor): {outcome.problem}"
        return
    if outcome.finished:
        if returncode != 0:  # every check reported; the crash came at interpreter exit
            outcome.note = (f"note: the process ended with "
                            f"{_signal_name(returncode) if returncode < 0 else f'exit code {returncode}'} "
                            f"after all checks had reported; the checks' results stand.")
        return
    stuck = next((c for c in outcome.checks if c.passed is None and not c.message), None)
    where = f" during check '{stuck.name}'" if stuck else ""
    if timed_out:
        what = f"timed out after {limit:.0f} s{where} (an infinite loop, or far too slow)"
    elif returncode < 0:
        name = _signal_name(returncode)
        what = f"crashed with {name}{where}: {_SIGNAL_MEANING.get(name, 'killed by a signal')}"
    else:
        what = f"the process exited with code {returncode}{where} before finishing (os._exit or exit() in your code?)"
    if stuck:
        stuck.message = what
    frames = _student_frames(output, impl_dir)
    details = [what]
    if frames:
        details.append("  your code was here (most recent call first):\n" + frames)
    elif output:
        details.append("  last output:\n" + "\n".join(f"    {line}" for line in output.splitlines()[-12:]))
    outcome.problem = "\n".join(details)
