"""One task's way from plan to score: the grader's pipeline.

    plan      plan_for: the task's checks (registry), each hidden scenario drawn from the seed
    requests  requests_for: each check as its driver's name and data, with the empty engines'
              bytes; the finished plan the check child gets (it consults no registry)
    records   _run_children: `pagedlab.drivers.child` as the sandbox user (`sandbox.run_limited`
              under the task's Policy), a fresh child after each crash or hang
    expected  _expected_records: committed (golden), computed (trusted), or the reference solution
              run as one more child fed the same plan
    verdicts  judge each record against the expected one; causes; the task's score

A segfault, an infinite loop, `os._exit` or a runaway compiler ends one child only, and nothing it
started outlives it: the check it died in fails with the crash explained, the remaining checks
run in a fresh child. The child only records what it observed; each verdict is made here. The
notebooks' graded cells (`pagedlab.graded.run`) and `pagedlab grade` both come through here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from .. import track
from ..drivers import given
from ..drivers import record as check_record
from ..sandbox.policy import WALL_FACTOR, Policy
from ..sandbox.process import Finished, run_limited
from ..sandbox.users import KillFailed, Sandbox
from ..spec import catalog, manifest
from ..untrusted import escape
from ..verdicts import CheckOutcome, TaskOutcome
from . import golden, registry
from . import records as child_record
from .causes import refer_to_causes
from .judge import judge, refer_to_first_report

# Seconds between the child's own stack dump (faulthandler) and the parent's SIGKILL.
GRACE = 5.0
# The child imports this very pagedlab, installed or not.
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)


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


def missing_files(row: manifest.Task, impl_dir: Path, part_a: track.Track | None = None) -> list[str]:
    """The files `row` needs that the submission lacks; Part A's is the file its track grades."""
    files = [part_a.file if part_a is not None and name == track.PYTHON_FILE else name for name in row.files]
    return [name for name in files if not (impl_dir / name).is_file()]


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


CPU_SLACK = 0.5  # seconds: the check child's interval between two looks at its CPU time
REPEATS = 3  # consecutive identical deaths after which the remaining checks are not run


def _run_children(task: str, impl: str, requests: list[dict], *, limit: float, env: dict | None,
                  policy: Policy, reference: bool = False, part_a: str | None = None) -> tuple[dict, dict, str, str]:
    """Run `requests` (`requests_for`) in children, a fresh one after each crash or hang, each
    confined by `policy` (`child_policy`) with the time left of `limit`.
    `reference`: the reference solution runs in them, no student code, so a failure to start is the grader's.
    `part_a`: the track the grader decided ("c" or "python"), for the child's loader.

    Returns (records by index, problems by index, a grader problem, the last output tail).
    """
    records, problems, deaths = {}, {}, []
    grader_problem, output = "", ""
    # The limit is CPU time of the task's processes; the clock allows WALL_FACTOR times more.
    cpu_used, retried = 0.0, False
    deadline = time.monotonic() + limit * WALL_FACTOR
    start = 0
    while start < len(requests):
        remaining = limit - cpu_used
        wall_left = deadline - time.monotonic()
        if remaining <= 0.5 or wall_left <= 0.5:
            for index in range(start, len(requests)):
                problems.setdefault(index, f"not run: the task's time limit ({limit:.0f} s of CPU time) was used up")
            break
        request = {"task": task, "impl": impl, "checks": requests[start:], "dump_after": round(remaining, 1),
                   "began": time.time(), "track": part_a}
        try:
            end = _check_child(impl, request, policy.but(timeout=remaining + GRACE), env=env)
        except KillFailed as exc:
            grader_problem = f"the sandbox's kill step failed: {exc}"
            break
        if end.wall_out and end.starved:
            # Killed by the clock while waiting for a CPU: the machine's load, never the code's.
            if not retried:
                retried = True
                deadline = time.monotonic() + limit * WALL_FACTOR
                continue
            grader_problem = (f"the machine was too busy: the checks got {end.cpu_seconds:.0f} s of CPU time "
                              f"in {end.seconds:.0f} s, twice")
            break
        cpu_used += end.cpu_seconds
        got = child_record.parse(end.record, end.record_size)
        output = end.output
        if got.malformed and not got.records:
            # The record was flooded or mangled (by the task's own code: only it writes there).
            for index in range(start, len(requests)):
                problems.setdefault(index, got.malformed)
            break
        if not got.started:
            what = _ended("the check process ended before its checks started", end, limit)
            if reference:
                grader_problem = what
            elif not _plan_starts(task, impl, requests[start:], env=env, policy=policy, part_a=part_a):
                # The same plan with no submission file loaded fails too: the grader's.
                grader_problem = what + "\n(the same checks fail to start without the submission too)"
            else:  # the submission's code may have rewritten the record: its failure
                for index in range(start, len(requests)):
                    problems.setdefault(index, what)
            break
        for index, record in got.records.items():
            if isinstance(index, int) and 0 <= index < len(requests) - start:
                records[start + index] = record
        if got.malformed:
            problems[start + max(got.began, 0)] = got.malformed
        if got.finished:
            break
        stuck = start + got.began if 0 <= got.began < len(requests) - start else start
        if stuck not in records:
            # the child dumps its stack and exits at `dump_after` s of CPU time, before the kill;
            # it looks twice a second, and the parent's count can miss what a kernel runner it
            # never reaped used since the parent's last look: a child that ran that close to its
            # limit did not sleep
            timed_out = end.timed_out or end.cpu_seconds >= request["dump_after"] - CPU_SLACK
            if not timed_out and end.returncode == 1 and end.seconds >= request["dump_after"]:
                # ...or once it has slept that long on the clock
                end = dataclasses.replace(end, timed_out=True, wall_out=True)
                timed_out = True
            problems[stuck] = _explain_death(end, timed_out, limit)
            deaths.append(problems[stuck].splitlines()[0])
        start = stuck + 1
        if len(deaths) >= REPEATS and len(set(deaths[-REPEATS:])) == 1:
            # The same crash every time: the rest would only repeat it.
            for index in range(start, len(requests)):
                problems.setdefault(index, f"not run: the {REPEATS} checks before it ended the same way "
                                           f"({deaths[-1]})")
            break
    return records, problems, grader_problem, output


def child_policy(base: Policy | None = None, sandbox: Sandbox | None = None) -> Policy:
    """How a check child is confined: `base` (the grading's, `Policy.from_env` when None) with
    the course's memory limit, a record to read back, and `sandbox` (None: as the caller)."""
    base = Policy.from_env() if base is None else base
    return base.but(memory_bytes=manifest.memory_limit() * 2**30, record_cap=child_record.MAX_RECORD_BYTES,
                    sandbox=sandbox)


def _check_child(impl: str, request: dict, policy: Policy, *, env: dict | None) -> Finished:
    """One `pagedlab.drivers.child` on `request`, confined by `policy`."""
    # The given functions of the course files (the child cannot read expected.json), so a crash
    # inside a given list helper is told at the student's call.
    request = {**request, "given": given.given_functions()}
    plugin = registry.plugin_path()
    if plugin:  # tests' stand-in checks: the child loads what the plan names
        request["plugin"] = plugin
    return run_limited([sys.executable, "-s", "-m", "pagedlab.drivers.child"], policy, env=_child_env(impl, env),
                       stdin=json.dumps(request).encode())


PROBE_SECONDS = 60.0  # CPU time for a child to load a plan's drivers


def _plan_starts(task: str, impl: str, requests: list[dict], *, env: dict | None, policy: Policy,
                 part_a: str | None) -> bool:
    """Whether a check child started on `requests` with no submission file loaded (its `probe`:
    the plan's drivers found, then exit), in the same sandbox: run when the submission's child
    ended before it started. The probe's own record is the only one it writes (no student code
    runs in it), so a child that cannot load the grader's plan is never counted against the
    student, and a submission cannot claim to be the grader's problem."""
    request = {"task": task, "impl": impl, "checks": requests, "probe": True, "track": part_a}
    try:
        end = _check_child(impl, request, policy.but(timeout=PROBE_SECONDS), env=env)
    except KillFailed:
        return True  # the sandbox's own failure is reported by the run that follows
    return child_record.parse(end.record, end.record_size).started


def _ended(what: str, end: Finished, limit: float) -> str:
    if end.wall_out:
        what += f" (it waited {end.seconds:.0f} s without using the CPU)"
    elif end.timed_out:
        what += f" (timed out after {limit:.0f} s of CPU time)"
    elif end.returncode < 0:
        what += f" ({_signal_name(end.returncode)})"
    else:
        what += f" (exit code {end.returncode})"
    if end.output:
        what += ":\n" + "\n".join(f"    {line}" for line in end.output.splitlines()[-12:])
    return what


def _explain_death(end: Finished, timed_out: bool, limit: float) -> str:
    if timed_out and end.wall_out:
        what = (f"timed out: it waited {end.seconds:.0f} s and used only {end.cpu_seconds:.0f} s of CPU time "
                "(sleeping, blocked on a lock or on input that never comes)")
    elif timed_out:
        what = f"timed out after {limit:.0f} s of CPU time (an infinite loop, or far too slow)"
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
            if check_record.is_student_file(filename):
                lines.append(text)
    return "\n".join(f"    {line}" for line in lines[:8])


REFERENCE_ENV = "PAGEDLAB_REFERENCE"  # another reference implementation (tests of the grader)
NO_REFERENCE = "the reference solutions are not part of this edition, so these checks cannot be judged here"


def _expected_records(task: str, plan: list[tuple[str, int]], checks: list, requests: list[dict], *,
                     env: dict | None, limit: float, policy: Policy) -> tuple[dict, str]:
    """The expected record of every planned check: computed expectations, committed records of
    the public checks, or — for hidden checks — the reference solution run now on the same
    scenario data, in a child of the grader's own (trusted) user."""
    expected, need_reference = {}, []
    for index, (c, (_, seed), request) in enumerate(zip(checks, plan, requests, strict=True)):
        if c.expected is not None:
            try:
                # root-only in the grading set-up, like everything that computes an answer
                from .trusted.expectations import expected_stream

                expected[index] = expected_stream(c, seed, scenario=request.get("scenario"))
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
    from ..course import UntrustedFolder, reference_dir

    # The grader's own installation (or the folder root configured), never a course folder found
    # from the working directory: a submission can write folders above a grade-class output.
    try:
        reference = str(reference_dir(os.environ.get(REFERENCE_ENV)))
    except UntrustedFolder as exc:
        return expected, f"the reference solutions were not run: {exc}"
    except FileNotFoundError:
        return expected, NO_REFERENCE
    sub_plan = [requests[i] for i in need_reference]
    records, problems, grader_problem, _ = _run_children(task, reference, sub_plan, limit=limit, env=env,
                                                         policy=policy, reference=True)
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
    public = registry.checks_of(row.id, hidden=False)
    secret = registry.checks_of(row.id, hidden=True, hidden_from=hidden_from) if hidden else []
    seed = secrets.randbelow(2**31) if hidden_seed is None else hidden_seed
    # Feedback-only checks go last: a hang there must not eat the time of checks that score.
    scored = [c for c in public if not row.is_feedback(c.name)]
    feedback = [c for c in public if row.is_feedback(c.name)]
    checks = scored + secret + feedback
    plan = ([(c.key, 0) for c in scored] + [(c.key, (seed + i) % 2**31) for i, c in enumerate(secret)]
            + [(c.key, 0) for c in feedback])
    return checks, plan


def requests_for(checks: list, plan: list[tuple[str, int]]) -> list[dict]:
    """What the child is sent for each planned check, a finished plan it needs no registry for:
    a public check's driver by name (`registry.public_driver`) with its case data; for a hidden
    one, the name of its public driver and the scenario drawn here from its seed (data, never the
    seed); and the bytes of the empty engines its scenes start from, written here (no code in the
    child makes an engine: `pagedlab.grader.trusted.engines`)."""
    from .trusted import engines

    requests = []
    for c, (key, seed) in zip(checks, plan, strict=True):
        if c.scenario is None:
            if c.hidden:
                raise ValueError(f"the hidden check {c.name!r} has no scenario planner (a seed is never sent)")
            request = {"key": key, **registry.public_driver(c)}
            if c.cases is not None:
                request["cases"] = json.loads(json.dumps(c.cases, allow_nan=False))
        else:
            request = {"key": key, "driver": catalog.driver_name(c.driver),
                       "scenario": catalog.scenario_data(c, seed)}
        request["engines"] = engines.for_totals(registry.engine_totals(c, request.get("scenario")))
        requests.append(request)
    return requests


def run_task(row: manifest.Task, impl: str, impl_dir: Path, *, env: dict | None = None,
             sandbox: Sandbox | None = None, hidden: bool = False, hidden_seed: int | None = None,
             hidden_from: Path | None = None, time_limit: float | None = None,
             track_choice: str | None = None, shown: dict | None = None, policy: Policy | None = None) -> TaskOutcome:
    """Grade `row` against `impl` (a name the loader accepts; `impl_dir` is its folder).
    `track_choice`: "c" or "python" for Part A (`--track`); None decides from the files.
    `shown`: the causes earlier tasks of the same grade explained (`grader.causes`).
    `policy`: the grading's confinement (`Policy.from_env()` when None); the submission's children
    run as `sandbox`, the reference's as the caller."""
    outcome = TaskOutcome(row)
    part_a = track.decide(impl_dir, track_choice) if track.PYTHON_FILE in row.files else None
    outcome.part_a = part_a
    missing = missing_files(row, impl_dir, part_a)
    if missing:
        why = f" ({part_a.line()})" if part_a is not None and part_a.chosen_by else ""
        outcome.problem = (f"{' and '.join(missing)} is missing from the submission ({impl_dir.name}/), "
                           f"and {row.label} needs it{why}. Submit your exercises/ files under their original names.")
        return outcome
    try:
        checks, plan = plan_for(row, hidden=hidden, hidden_seed=hidden_seed, hidden_from=hidden_from)
        requests = requests_for(checks, plan)
    except Exception as exc:  # noqa: BLE001 - a broken check module is the grader's problem
        outcome.grader_error = True
        outcome.problem = f"autograder problem, not your code (tell your instructor): loading the checks failed: {type(exc).__name__}: {exc}"
        return outcome
    if not checks:
        outcome.grader_error = True
        outcome.problem = f"autograder problem, not your code (tell your instructor): {row.id} has no checks"
        return outcome
    limit = time_limit if time_limit is not None else row.time_limit * time_scale()
    try:
        base = Policy.from_env() if policy is None else policy
    except ValueError as exc:  # a knob this machine cannot honour: never a silently weaker sandbox
        outcome.grader_error = True
        outcome.problem = f"autograder problem, not your code (tell your instructor): {exc}"
        return outcome
    began = time.perf_counter()
    trusted: dict = {}
    trusted_problem = [""]

    def reference_with_problem() -> None:
        found, problem = _expected_records(row.id, plan, checks, requests, env=env, limit=limit,
                                          policy=child_policy(base))
        trusted.update(found)
        trusted_problem[0] = problem

    import threading

    worker = threading.Thread(target=reference_with_problem, daemon=True)
    worker.start()
    records, problems, grader_problem, output = _run_children(row.id, impl, requests, limit=limit, env=env,
                                                              policy=child_policy(base, sandbox),
                                                              part_a=part_a and part_a.name)
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
            if trusted_problem[0] and (not c.hidden or trusted_problem[0] != NO_REFERENCE):
                outcome.grader_error = True  # the reference's failure is never the student's
            continue
        problem = problems.get(index, "")
        if index not in records and problem.startswith("not run"):
            outcome.checks.append(CheckOutcome(c.name, None, problem, scored=scored, hidden=c.hidden))
            continue
        try:
            verdict = judge(want, records.get(index), problem=problem, rule=c.rule)
        except (ValueError, TypeError, RecursionError, OverflowError) as exc:
            # The trusted side is the reference's, so what cannot be compared is the record.
            outcome.checks.append(CheckOutcome(c.name, False, f"the check's record could not be judged "
                                               f"({type(exc).__name__}): something in the task wrote "
                                               "values no honest run produces", scored=scored, hidden=c.hidden))
            continue
        if verdict.grader_problem:
            outcome.grader_error = True
        outcome.checks.append(CheckOutcome(c.name, verdict.passed, verdict.message, scored=scored,
                                           hidden=c.hidden, rule=verdict.rule, gist=verdict.gist,
                                           cause=verdict.cause, hint=verdict.hint))
    refer_to_first_report(outcome.checks)  # a kernel's sanitizer report once, not under every check
    # One cause, one explanation: a file that does not compile, a rule later checks rely on.
    refer_to_causes(outcome.checks, {c.name: c.follows for c in checks if not c.hidden}, shown=shown,
                    label=row.label)
    if outcome.grader_error:
        first = next((c.message for c in outcome.checks if c.message and "reference" in c.message), trusted_problem[0])
        outcome.problem = f"autograder problem, not your code (tell your instructor): {first}"
    return _printable(outcome)


def _printable(outcome: TaskOutcome) -> TaskOutcome:
    """Messages carry the submission's text: an escape sequence or a carriage return must not
    redraw a terminal, a lone surrogate must not break printing or results.json; shown escaped."""
    for c in outcome.checks:
        c.message = printable(c.message)
    outcome.problem = printable(outcome.problem)
    return outcome


def printable(text: str) -> str:
    return escape(text)


def time_scale() -> float:
    return manifest.time_scale()
