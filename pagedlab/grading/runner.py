"""Run one task's checks: drivers in a limited child process, verdicts here.

The student's code runs in a child (`pagedlab.checks.child`) in a new process group: a segfault,
an infinite loop, `os._exit` or a runaway compiler kills that child only, and on timeout the whole
group is killed, so nothing the task started outlives it. A check the child died in fails with
the crash explained, and the remaining checks run in a fresh child. The child only records what
it observed; each check's verdict is the judge's, in this process (`pagedlab.checks.judge`).
The notebooks' graded cells and `pagedlab grade` both come through here.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import manifest
from ..checks import framework, golden
from ..checks.judge import judge, refer_to_first_report
from .points import memory_limit

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
    scored: bool = True  # False: feedback only (the manifest's `feedback`)
    hidden: bool = False  # an instructor-only check: shown as a count, not by name


@dataclass
class TaskOutcome:
    row: manifest.Task
    checks: list[CheckOutcome] = field(default_factory=list)
    problem: str = ""  # why the task could not finish: crash, timeout, missing file, grader error
    grader_error: bool = False  # the problem is the autograder's, not the student's
    started: bool = False  # the child listed the task's checks
    finished: bool = False  # the child reported every check
    note: str = ""
    seconds: float = 0.0

    @property
    def task(self) -> str:
        return self.row.id

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
# Processes + threads the sandbox user may have at once. torch's pools, the kernel compiler and
# the executor's workers need a few dozen; a fork bomb needs more. Only under a sandbox user:
# RLIMIT_NPROC counts every process of the user, which on a laptop includes Jupyter itself.
NPROC_ENV = "PAGEDLAB_GRADE_NPROC"
NPROC = 128


def nproc_limit() -> int:
    text = os.environ.get(NPROC_ENV, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else NPROC


def _limits(nproc: int):
    def apply() -> None:  # runs in the child between fork and exec: no imports here
        if resource is None:
            return
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            limit = int(_memory_limit_bytes)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            if nproc:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        except (ValueError, OSError):
            pass

    return apply


_limit_child_resources = _limits(0)


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


NO_NETWORK_ENV = "PAGEDLAB_GRADE_NO_NETWORK"


def no_network() -> bool:
    """PAGEDLAB_GRADE_NO_NETWORK=1: the sandboxed child gets no network (needs root, unshare and
    setpriv from util-linux; refused with a clear error when they are missing)."""
    if os.environ.get(NO_NETWORK_ENV, "").strip() not in ("1", "true", "yes"):
        return False
    import shutil

    missing = [tool for tool in ("unshare", "setpriv") if shutil.which(tool) is None]
    if missing:
        raise ValueError(f"{NO_NETWORK_ENV}=1 needs {' and '.join(missing)} (util-linux) on PATH")
    return True


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




@dataclass
class Finished:
    """How a limited child process ended."""

    returncode: int
    timed_out: bool
    output: str  # the tail of its merged stdout/stderr
    seconds: float


def run_limited(cmd: list[str], *, env: dict, timeout: float, cwd: Path, output_path: Path,
                sandbox: Sandbox | None = None, home: Path | None = None, stdin: bytes | None = None) -> Finished:
    """Run `cmd` in a new process group; after `timeout` s kill the whole group. With a
    `sandbox` it runs as that user (with a process cap), with `home` (a scratch folder handed to
    the user) as HOME. `stdin` is written to the child's standard input."""
    global _memory_limit_bytes
    _memory_limit_bytes = memory_limit() * 2**30
    began = time.perf_counter()
    timed_out = False
    as_user = {}
    if sandbox is not None:
        as_user = {"user": sandbox.uid, "group": sandbox.gid, "extra_groups": []}
        if no_network():
            # A network namespace of its own (only loopback, down): made as root, then the user.
            cmd = ["unshare", "--net", "--", "setpriv", f"--reuid={sandbox.uid}", f"--regid={sandbox.gid}",
                   "--clear-groups", "--", *cmd]
            as_user = {}
        home = home or cwd
        sandbox.own(home)
        env = {**env, "HOME": str(home), "MPLCONFIGDIR": str(home / ".matplotlib")}
    with open(output_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_limits(nproc_limit() if sandbox is not None else 0),
                                cwd=cwd, **as_user)
        try:
            if stdin is not None:
                try:
                    proc.stdin.write(stdin)
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
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


def missing_files(row: manifest.Task, impl_dir: Path) -> list[str]:
    from ..ctrack import ALTERNATE_FILES  # llm_memory.c stands in for memory_manager.py

    return [name for name in row.files if not (impl_dir / name).is_file()
            and not any((impl_dir / alt).is_file() for alt in ALTERNATE_FILES.get(name, ()))]


# The child's record of a task may not exceed this (a flood of fake observations is a failure).
MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 40


def _depth_ok(value, limit: int = MAX_DEPTH) -> bool:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


@dataclass
class _ChildRun:
    """What one child process reported: records by index, where it was, how it ended."""

    records: dict = field(default_factory=dict)
    began: int = -1
    started: bool = False
    finished: bool = False
    grader_error: str = ""
    malformed: str = ""
    end: Finished | None = None


def _read_events(path: Path) -> _ChildRun:
    run = _ChildRun()
    try:
        size = path.stat().st_size
    except OSError:
        return run
    if size > MAX_RECORD_BYTES:
        run.malformed = (f"the check record grew to {size / 2**20:.0f} MB (limit "
                         f"{MAX_RECORD_BYTES // 2**20} MB): something in the task wrote into it")
        return run
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue  # a line cut short by a crash
        if not isinstance(event, dict) or not _depth_ok(event):
            run.malformed = "the check record held malformed data"
            continue
        kind = event.get("event")
        if kind == "grader_error":
            run.grader_error = str(event.get("message", ""))[:2000]
        elif kind == "start":
            run.started = True
        elif kind == "begin" and isinstance(event.get("index"), int):
            run.began = event["index"]
        elif kind == "record" and isinstance(event.get("index"), int):
            try:
                run.records[event["index"]] = framework.Stream.from_json(event.get("record"))
            except ValueError as exc:
                run.malformed = f"the record of a check was malformed ({exc})"
        elif kind == "done":
            run.finished = True
    return run


def _child_env(impl: str, env: dict | None) -> dict:
    child_env = dict(os.environ if env is None else env)
    child_env["PAGEDLAB_IMPL"] = impl
    if impl in ("exercises", "solutions") and "PAGEDLAB_COURSE" not in child_env:
        from ..course import find as find_course  # the child starts in a scratch folder

        child_env["PAGEDLAB_COURSE"] = str(find_course() or "")
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, child_env.get("PYTHONPATH")]))
    child_env.setdefault("MPLBACKEND", "Agg")
    return child_env


REPEATS = 3  # consecutive identical deaths after which the remaining checks are not run


def _run_children(task: str, impl: str, plan: list[tuple[str, int]], *, limit: float, env: dict | None,
                  sandbox: Sandbox | None) -> tuple[dict, dict, str, str]:
    """Run `plan` ((check key, seed) pairs) in children, a fresh one after each crash or hang.

    Returns (records by index, problems by index, a grader problem, the last output tail).
    """
    records, problems, deaths = {}, {}, []
    grader_problem, output = "", ""
    deadline = time.monotonic() + limit
    start = 0
    while start < len(plan):
        remaining = deadline - time.monotonic()
        if remaining <= 0.5:
            for index in range(start, len(plan)):
                problems.setdefault(index, f"not run: the task's time limit ({limit:.0f} s) was used up")
            break
        with tempfile.TemporaryDirectory(prefix=f"pagedlab-{task}-") as scratch:
            scratch = Path(scratch)
            events = scratch / "events.jsonl"
            events.touch()
            if sandbox is not None:
                scratch.chmod(0o700)
                sandbox.own(scratch)
                sandbox.own(events)
            request = {"task": task, "impl": impl, "checks": plan[start:], "dump_after": round(remaining, 1)}
            end = run_limited([sys.executable, "-m", "pagedlab.checks.child", str(events)],
                              env=_child_env(impl, env), timeout=remaining + GRACE, cwd=scratch,
                              output_path=scratch / "output.txt", sandbox=sandbox,
                              stdin=json.dumps(request).encode())
            got = _read_events(events)
        output = end.output
        if got.grader_error:
            grader_problem = got.grader_error
            break
        if got.malformed and not got.records:
            # The record was flooded or mangled (by the task's own code: only it writes there).
            for index in range(start, len(plan)):
                problems.setdefault(index, got.malformed)
            break
        if not got.started:
            grader_problem = _ended("the check process ended before its checks started", end, limit)
            break
        for index, record in got.records.items():
            records[start + index] = record
        if got.malformed:
            problems[start + max(got.began, 0)] = got.malformed
        if got.finished:
            break
        stuck = start + got.began if got.began >= 0 else start
        if stuck not in records:
            timed_out = end.timed_out or end.seconds >= remaining
            problems[stuck] = _explain_death(end, timed_out, limit)
            deaths.append(problems[stuck].splitlines()[0])
        start = stuck + 1
        if len(deaths) >= REPEATS and len(set(deaths[-REPEATS:])) == 1:
            # The same crash every time: the rest would only repeat it.
            for index in range(start, len(plan)):
                problems.setdefault(index, f"not run: the {REPEATS} checks before it ended the same way "
                                           f"({deaths[-1]})")
            break
    return records, problems, grader_problem, output


def _ended(what: str, end: Finished, limit: float) -> str:
    if end.timed_out:
        what += f" (timed out after {limit:.0f} s)"
    elif end.returncode < 0:
        what += f" ({_signal_name(end.returncode)})"
    else:
        what += f" (exit code {end.returncode})"
    if end.output:
        what += ":\n" + "\n".join(f"    {line}" for line in end.output.splitlines()[-12:])
    return what


def _explain_death(end: Finished, timed_out: bool, limit: float) -> str:
    if timed_out:
        what = f"timed out after {limit:.0f} s (an infinite loop, or far too slow)"
    elif end.returncode < 0:
        name = _signal_name(end.returncode)
        what = f"crashed with {name}: {_SIGNAL_MEANING.get(name, 'killed by a signal')}"
    else:
        what = (f"the process exited with code {end.returncode} in the middle of the check "
                "(os._exit or exit() in your code?)")
    frames = _student_frames(end.output)
    if frames:
        return what + "\n  your code was here (most recent call first):\n" + frames
    if end.output:
        return what + "\n  last output:\n" + "\n".join(f"    {line}" for line in end.output.splitlines()[-12:])
    return what


def _student_frames(dump: str) -> str:
    """From a faulthandler dump, the frames in the student's files (where their code was)."""
    lines = []
    for line in dump.splitlines():
        text = line.strip()
        if text.startswith("File \"") and "line" in text:
            filename = text.split('"')[1]
            if framework.is_student_file(filename):
                lines.append(text)
    return "\n".join(f"    {line}" for line in lines[:8])


REFERENCE_ENV = "PAGEDLAB_REFERENCE"  # another reference implementation (tests of the grader)


def _trusted_records(task: str, plan: list[tuple[str, int]], checks: list, *, env: dict | None,
                     limit: float) -> tuple[dict, str]:
    """The expected record of every planned check: computed expectations, committed records of
    the public checks, or — for hidden checks — the reference solution run now, with the same
    seeds, in a child of the grader's own (trusted) user."""
    expected, need_reference = {}, []
    for index, (c, (_, seed)) in enumerate(zip(checks, plan, strict=True)):
        if c.expected is not None:
            try:
                expected[index] = framework.expected_stream(c, seed)
            except Exception as exc:  # noqa: BLE001 - a broken expectation is the grader's problem
                return expected, f"computing the expected result of {c.name!r} failed: {type(exc).__name__}: {exc}"
            continue
        record = golden.record(c.key) if (not c.hidden and seed == 0) else None
        if record is not None:
            expected[index] = record
        else:
            need_reference.append(index)
    if not need_reference:
        return expected, ""
    from ..loader import impl_dir

    reference = os.environ.get(REFERENCE_ENV) or "solutions"
    try:
        impl_dir(reference)
    except FileNotFoundError:
        return expected, ("the reference solutions are not part of this edition, so these checks "
                          "cannot be judged here")
    sub_plan = [plan[i] for i in need_reference]
    records, problems, grader_problem, _ = _run_children(task, reference, sub_plan, limit=limit, env=env,
                                                         sandbox=None)
    if grader_problem:
        return expected, f"running the reference solution failed: {grader_problem}"
    for position, index in enumerate(need_reference):
        if position in records:
            expected[index] = records[position]
        else:
            return expected, f"running the reference solution failed: {problems.get(position, 'no record')}"
    return expected, ""


def plan_for(row: manifest.Task, *, hidden: bool, hidden_seed: int | None = None,
             hidden_from: Path | None = None) -> tuple[list, list]:
    """(checks, plan): public checks with seed 0, then the hidden ones with seeds drawn now."""
    public = framework.checks_of(row.id, hidden=False)
    secret = framework.checks_of(row.id, hidden=True, hidden_from=hidden_from) if hidden else []
    seed = secrets.randbelow(2**31) if hidden_seed is None else hidden_seed
    # Feedback-only checks go last: a hang there must not eat the time of checks that score.
    scored = [c for c in public if not row.is_feedback(c.name)]
    feedback = [c for c in public if row.is_feedback(c.name)]
    checks = scored + secret + feedback
    plan = ([(c.key, 0) for c in scored] + [(c.key, (seed + i) % 2**31) for i, c in enumerate(secret)]
            + [(c.key, 0) for c in feedback])
    return checks, plan


def run_task(row: manifest.Task, impl: str, impl_dir: Path, *, env: dict | None = None,
             sandbox: Sandbox | None = None, hidden: bool = False, hidden_seed: int | None = None,
             hidden_from: Path | None = None, time_limit: float | None = None) -> TaskOutcome:
    """Grade `row` against `impl` (a name the loader accepts; `impl_dir` is its folder)."""
    outcome = TaskOutcome(row)
    missing = missing_files(row, impl_dir)
    if missing:
        outcome.problem = (f"{' and '.join(missing)} is missing from the submission ({impl_dir.name}/), "
                           f"and {row.label} needs it. Submit your exercises/ files under their original names.")
        return outcome
    try:
        checks, plan = plan_for(row, hidden=hidden, hidden_seed=hidden_seed, hidden_from=hidden_from)
    except Exception as exc:  # noqa: BLE001 - a broken check module is the grader's problem
        outcome.grader_error = True
        outcome.problem = f"autograder problem, not your code (tell your instructor): loading the checks failed: {type(exc).__name__}: {exc}"
        return outcome
    if not checks:
        outcome.grader_error = True
        outcome.problem = f"autograder problem, not your code (tell your instructor): {row.id} has no checks"
        return outcome
    limit = time_limit if time_limit is not None else row.time_limit * time_scale()
    began = time.perf_counter()
    trusted: dict = {}
    trusted_problem = [""]

    def reference_with_problem() -> None:
        found, problem = _trusted_records(row.id, plan, checks, env=env, limit=limit)
        trusted.update(found)
        trusted_problem[0] = problem

    import threading

    worker = threading.Thread(target=reference_with_problem, daemon=True)
    worker.start()
    records, problems, grader_problem, output = _run_children(row.id, impl, plan, limit=limit, env=env,
                                                              sandbox=sandbox)
    worker.join()
    outcome.seconds = round(time.perf_counter() - began, 2)
    if grader_problem:
        outcome.grader_error = True
        outcome.problem = f"autograder problem, not your code (tell your instructor): {grader_problem}"
        return outcome
    outcome.started = True
    outcome.finished = len(records) == len(plan)
    for index, c in enumerate(checks):
        scored = not row.is_feedback(c.name)
        want = trusted.get(index)
        if want is None:
            text = trusted_problem[0] or "no expected result for this check"
            outcome.checks.append(CheckOutcome(c.name, False, text, scored=scored, hidden=c.hidden))
            if trusted_problem[0] and not c.hidden:
                outcome.grader_error = True
            continue
        problem = problems.get(index, "")
        if index not in records and problem.startswith("not run"):
            outcome.checks.append(CheckOutcome(c.name, None, problem, scored=scored, hidden=c.hidden))
            continue
        verdict = judge(want, records.get(index), problem=problem)
        if verdict.grader_problem:
            outcome.grader_error = True
        outcome.checks.append(CheckOutcome(c.name, verdict.passed, verdict.message, scored=scored,
                                           hidden=c.hidden))
    refer_to_first_report(outcome.checks)  # a kernel's sanitizer report once, not under every check
    if outcome.grader_error:
        first = next((c.message for c in outcome.checks if c.message and "reference" in c.message), trusted_problem[0])
        outcome.problem = f"autograder problem, not your code (tell your instructor): {first}"
    return outcome


def time_scale() -> float:
    from .points import time_scale as scale

    return scale()
