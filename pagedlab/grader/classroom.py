"""`pagedlab grade-class`: grade every submission of a class, N at a time, resumably.

The unit of work is the one-submission command, `python -m pagedlab grade --impl FOLDER --json
results.json`, run as a subprocess: each submission gets exactly what `pagedlab grade` gives it
(the same isolation, sandbox user, hidden checks), a crash of the grader on one submission
cannot take the batch down, and the same command runs unchanged under a batch engine (Slurm
recipe in grading/README.md). Everything lands in OUT:

    OUT/queue.txt, options.json, interpreter, logs/   what a batch array grades from (class_queue)
    (OUT and every student's folder are root's only, 0700: under a sandbox pool each job runs as
    a user of its own, which `pagedlab grade` takes with a lock per user on this machine, and it
    copies the files into that job's own folder, readable by that user only, just before it
    grades them)
    OUT/students/KEY/student.json      name, email, where the submission came from
    OUT/students/KEY/files/            the files the grader takes (safe copy: hashing, similarity)
    OUT/students/KEY/results.json      what `pagedlab grade --json` wrote
    OUT/students/KEY/state.json        hash of the files + grader version (options included):
                                       unchanged -> skipped; the key and the options, for the merge
    OUT/grades.csv, report.html, grader_problems.log   (class_report.py)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, loader, track
from ..sandbox import users
from ..sandbox.policy import WALL_FACTOR
from ..spec import points
from ..untrusted import escape_line
from . import class_queue, submission
from .class_folder import QUEUE, STUDENTS, is_empty, student_dir  # noqa: F401 - classroom's names too
from .intake import Student, discover
from .usable import interpreter_problem

# The grading subprocess gets its tasks' time limits this many times over (plus start-up) before
# the batch calls it a grader problem; a student's hang is caught long before, per task. The limits
# are CPU time: on a busy machine a task may take WALL_FACTOR times as long on the clock, twice
# (a starved child is run again once).
SLACK = 2 * WALL_FACTOR + 1
STARTUP_SECONDS = 120.0
# The batch's own modules: editing them (the report, the intake) changes no score, so no regrade.
BATCH_ONLY = {"classroom.py", "class_report.py", "class_folder.py", "class_queue.py", "array_task.py",
              "similarity.py", "intake.py"}


def grader_version(tasks: list[str] | None, hidden, track_choice: str | None = None) -> str:
    """Changes whenever a regrade could change a score: the package, its checks and grader code,
    the task manifest, the reference records, the hidden checks and solutions, and the options
    (the grader's PAGEDLAB_* knobs and --track among them: a rerun with another time scale regrades)."""
    # The options in their canonical form: "--tasks 1,12" here and the ids an array index reads
    # from options.json are one grader version.
    options = json.dumps(class_queue.options(tasks, hidden, track_choice), sort_keys=True)
    digest = hashlib.sha256(f"{__version__}|{options}".encode())
    package = Path(__file__).resolve().parent.parent
    roots = [package / "spec", package / "drivers", package / "grader", loader.ROOT / "solutions"]
    if hidden:
        from . import registry

        hidden_from = Path(hidden) if not isinstance(hidden, bool) else registry.hidden_dir()
        if hidden_from is not None:
            roots.append(hidden_from)
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                     and "__pycache__" not in p.parts
                                                     and p.name not in BATCH_ONLY)
        for path in paths:
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"


def files_hash(files: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(files.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def prepare(source: Path, out: Path, echo=print, *, tasks: list[str] | None = None, hidden=True,
            track_choice: str | None = None) -> list[Student]:
    """Find the students, copy each one's files safely, write the queue and the options a batch
    array grades them with (class_queue). Whatever goes wrong reading one upload is that
    student's row (graded with what could be taken, the reason in its intake.txt), never the class's."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    class_queue.options(tasks, hidden, track_choice)  # an unknown task (or track) stops here, before anything is unpacked
    intake = discover(source, out / "unpacked")
    for line in intake.refused:
        echo(escape_line(line))  # member names are the uploads' own
    for s in intake.students:
        folder = student_dir(out, s.key)
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        files = folder / "files"
        if files.exists():
            shutil.rmtree(files)
        try:
            # An unpacked zip is the grader's own tree: its files are linked, not copied again.
            _, found = submission.prepare(s.folder, files, own=intake.unpacked, track_choice=track_choice)
        except Exception as exc:  # noqa: BLE001 - any failure on one upload is that student's
            # This student's upload only: graded with no files (0, said why), the class goes on.
            if files.exists():
                shutil.rmtree(files)
            files.mkdir()
            found = escape_line(f"the upload could not be read: {type(exc).__name__}: {str(exc)[:500]}")
            echo(f"{s.key}: {found}")
        mine = intake.refused_of(s.key)
        if mine:  # what the class zip held for this student and was not taken
            found += "\nNot taken from the class zip:\n" + "\n".join(f"  {escape_line(line)}" for line in mine)
        (folder / "intake.txt").write_text(found + "\n", encoding="utf-8")
        (folder / "student.json").write_text(json.dumps(s.meta(), indent=2) + "\n", encoding="utf-8")
    # Keys only: the upload's folder names (any byte but '/') never reach the queue.
    class_queue.write(out, [s.key for s in intake.students], tasks, hidden, track_choice)
    return intake.students


def grade_command(folder: Path, json_path: Path, tasks: list[str] | None, hidden,
                  track_choice: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "pagedlab", "grade", "--impl", str(folder), "--json", str(json_path)]
    if tasks:
        cmd += ["--tasks", ",".join(tasks)]
    if track_choice:
        cmd += ["--track", track_choice]
    if hidden is False:
        cmd.append("--no-hidden")
    elif not isinstance(hidden, bool):
        cmd += ["--hidden", str(hidden)]
    return cmd


def grading_timeout(tasks: list[str] | None) -> float:
    """Past this, the grading process itself is a grader problem (its wait for a free user of the
    sandbox pool included)."""
    limits = sum(row.time_limit for row in points.select(tasks))
    wait = users.wait_seconds() if users.pool() else 0.0
    return limits * points.time_scale() * SLACK + STARTUP_SECONDS + wait


@dataclass
class Job:
    student: Student
    proc: subprocess.Popen
    began: float
    log: object
    state: dict


def _is_current(folder: Path, state: dict) -> bool:
    try:
        old = json.loads((folder / "state.json").read_text())
    except (OSError, ValueError):
        return False
    return (old.get("hash") == state["hash"] and old.get("grader") == state["grader"]
            and old.get("key") == state.get("key") and old.get("status") == "graded"
            and (folder / "results.json").is_file())


def _start(out: Path, s: Student, state: dict, tasks, hidden, *, header: str = "",
           track_choice: str | None = None) -> Job:
    """Start grading one student. The grading process takes a user of the pool (PAGEDLAB_GRADE_USER)
    that no other job on this machine holds. `header`: a line that opens the log, appended to
    (a batch array's requeued index keeps what its earlier run wrote), instead of a fresh log."""
    folder = student_dir(out, s.key)
    for stale in ("results.json", "state.json"):
        (folder / stale).unlink(missing_ok=True)
    log = open(folder / "grade.log", "ab" if header else "wb")
    if header:
        log.write(header.encode("utf-8") + b"\n")
        log.flush()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [loader.ROOT.as_posix()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    # Its own session: the terminal's Ctrl-C reaches the batch only, which then stops each
    # grading process cleanly (SIGINT: it kills its task's process group on the way out).
    # The intake's copy (root-only), not the upload: nothing of the class is read from outside OUT.
    proc = subprocess.Popen(grade_command(folder / "files", folder / "results.json", tasks, hidden, track_choice),
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, cwd=folder)
    return Job(s, proc, time.monotonic(), log, state)


def _finish(out: Path, job: Job, *, timed_out: bool) -> dict:
    """Write state.json; return it. A grading process that timed out, crashed or wrote no
    results.json is a grader problem (the student's hang or crash ends inside it, per task)."""
    job.log.close()
    folder = student_dir(out, job.student.key)
    state = dict(job.state, seconds=round(time.monotonic() - job.began, 1), returncode=job.proc.returncode)
    results = folder / "results.json"
    if timed_out:
        state.update(status="grader problem", problem=f"the grading process itself ran over "
                     f"{state['seconds']:.0f}s and was killed (see grade.log)")
    elif job.proc.returncode != 0 or not results.is_file():
        state.update(status="grader problem", problem=f"the grading process exited with "
                     f"{job.proc.returncode} (see grade.log)" + ("" if results.is_file() else ", no results.json")
                     + _refusal(results))
    else:
        try:
            score = json.loads(results.read_text(encoding="utf-8"))["score"]
            state.update(status="graded", score=score)
        except (OSError, ValueError, KeyError) as exc:
            state.update(status="grader problem", problem=f"results.json unreadable: {exc}")
    return _write_state(folder, state)


def _refusal(results: Path) -> str:
    """What the grader said when it refused to grade (a pool that cannot run it, all its users busy):
    the first line of the results.json it wrote then (only root writes that file)."""
    try:
        output = json.loads(results.read_text(encoding="utf-8")[:100_000]).get("output", "")
    except (OSError, ValueError, AttributeError):
        return ""
    first = str(output).splitlines()[0] if str(output).strip() else ""
    refused = ("Grader misconfigured", "No submission to grade", "The pagedlab autograder itself failed")
    return f": {escape_line(first[:2000])}" if first.startswith(refused) else ""


def _write_state(folder: Path, state: dict) -> dict:
    tmp = folder / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / "state.json")
    return state


def _stop(job: Job) -> None:
    """SIGINT first (the grade process kills its task's process group), SIGKILL if it lingers."""
    try:
        os.killpg(job.proc.pid, signal.SIGINT)
        job.proc.wait(timeout=15)
    except (ProcessLookupError, PermissionError):
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(job.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.proc.wait()


class Progress:
    """tqdm's bar with an ETA on a terminal; one plain line per submission otherwise."""

    def __init__(self, total: int, done: int):
        self.total, self.done, self.bar = total, done, None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=done, unit="submission", dynamic_ncols=True)
            except ImportError:
                pass

    def say(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def step(self, text: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(text)
        else:
            print(f"[{self.done}/{self.total}] {text}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def check_pool_can_run(echo=print) -> None:
    """Before grading anything: a user of the pool runs this grader's Python and imports pagedlab,
    as every check process will (ValueError saying what to do when it cannot)."""
    if not users.pool():
        return
    with users.claimed(echo=echo) as user:
        problem = interpreter_problem(user)
    if problem:
        raise ValueError(problem)


def student_state(folder: Path, key: str, version: str, options: dict) -> dict:
    """What state.json starts from: the files' hash and the grader version (a rerun skips the
    student when both are unchanged), and for the merge the key and the options it was graded with."""
    return {"hash": files_hash(folder / "files"), "grader": version, "key": key, "options": options}


def grade_all(students: list[Student], out: Path, *, jobs: int, tasks: list[str] | None, hidden,
              echo=print, track_choice: str | None = None) -> dict[str, dict]:
    """Grade whatever is not current, `jobs` at a time, each running job under a user of the
    sandbox pool of its own. Raises KeyboardInterrupt after stopping the running graders (what
    finished stays finished: a rerun skips it), ValueError when the pool cannot run this grader.
    `track_choice`: every student's Part A from that file (`--track`); None: each submission's
    own files decide (pagedlab/track.py)."""
    out = Path(out).resolve()
    pool = users.pool()
    if pool and jobs > len(pool):
        echo(f"--jobs {jobs} capped to {len(pool)}: the sandbox pool ({users.USER_ENV}) has {len(pool)} "
             f"user{'s' if len(pool) != 1 else ''}, and two jobs under one user would kill each other's "
             "checks (add users to the pool: `useradd -M pagedlab-grade-N`, see grading/README.md)")
        jobs = len(pool)
    version = grader_version(tasks, hidden, track_choice)
    options = class_queue.options(tasks, hidden, track_choice)
    todo, states = [], {}
    for s in students:
        folder = student_dir(out, s.key)
        state = student_state(folder, s.key, version, options)
        if is_empty(folder / "files"):  # nothing to grade: its own status, not "graded, 0"
            (folder / "results.json").unlink(missing_ok=True)
            states[s.key] = _write_state(folder, dict(state, status="empty", score=0))
        elif _is_current(folder, state):
            states[s.key] = json.loads((folder / "state.json").read_text())
        else:
            todo.append((s, state))
    empty = sorted(k for k, st in states.items() if st["status"] == "empty")
    echo(f"{len(students)} submissions: {len(states) - len(empty)} already graded by this grader version "
         f"(unchanged files, skipped), "
         + (f"{len(empty)} empty (no file to grade: {', '.join(empty)}), " if empty else "")
         + f"{len(todo)} to grade, {jobs} at a time")
    if todo:
        check_pool_can_run(echo)
    progress = Progress(len(students), len(states))
    limit = grading_timeout(tasks)
    running: list[Job] = []
    # Ctrl-C only raises a flag: a KeyboardInterrupt in the middle of starting a grading process
    # could leave that process running, unknown to the batch.
    interrupted: list[int] = []
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        while todo or running:
            if interrupted:
                raise KeyboardInterrupt
            while todo and len(running) < jobs:
                s, state = todo.pop(0)
                running.append(_start(out, s, state, tasks, hidden, track_choice=track_choice))
            time.sleep(0.2)
            for job in list(running):
                late = time.monotonic() - job.began > limit
                if job.proc.poll() is None and not late:
                    continue
                if late and job.proc.poll() is None:
                    _stop(job)
                running.remove(job)
                state = _finish(out, job, timed_out=late)
                states[job.student.key] = state
                who = escape_line(job.student.name or job.student.key)
                if state["status"] == "graded":
                    progress.step(f"{who}: {state['score']:g} points ({state['seconds']:.0f}s)")
                else:
                    progress.step(f"{who}: GRADER PROBLEM: {state['problem']}")
    except KeyboardInterrupt:
        for job in running:
            _stop(job)
            job.log.close()
        raise
    finally:
        progress.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return states


def _refuse_readable_uploads(source: Path) -> None:
    """Under a sandbox pool, the class's uploads must not be open to other users: a submission
    graded at the same time would read its classmates' files from there."""
    if users.pool() and source.exists() and source.stat().st_mode & 0o005:
        raise ValueError(f"{source} can be read by other users, including the sandbox users that run the "
                         f"submissions' code; make it private first (chmod 700 {source})")


def _tasks(text: str | None) -> list[str] | None:
    return [t for t in text.replace(" ", ",").split(",") if t] if text else None


def main(args) -> int:
    from . import class_report

    out = Path(args.out).resolve()  # the grading processes run in each student's folder
    tasks = _tasks(args.tasks)
    track_choice = getattr(args, "track", None)
    try:
        points.select(tasks)
        track_choice = track.parse(track_choice, "--track")
        hidden = False if args.no_hidden else (args.hidden or True)
        if hidden is not True and hidden is not False and not Path(hidden).is_dir():
            raise FileNotFoundError(f"--hidden {hidden}: no such folder of hidden checks")
        hidden = str(Path(hidden).resolve()) if not isinstance(hidden, bool) else hidden
        out.mkdir(parents=True, exist_ok=True)
        _refuse_readable_uploads(Path(args.submissions))
        students = prepare(Path(args.submissions), out, tasks=tasks, hidden=hidden, track_choice=track_choice)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not students:
        print(f"error: no student folders in {args.submissions}", file=sys.stderr)
        return 2
    if args.prepare_only:
        print(f"prepared {len(students)} submissions; {out / QUEUE} lists them, one per array index, and "
              f"{out / class_queue.OPTIONS} the options every index grades with "
              f"({class_queue.describe(class_queue.options(tasks, hidden, track_choice))}). On Slurm:\n"
              f"  {class_queue.sbatch_line(out, list(range(len(students))))}")
        return 0
    jobs = args.jobs or os.cpu_count() or 1
    try:
        grade_all(students, out, jobs=max(1, jobs), tasks=tasks, hidden=hidden, track_choice=track_choice)
    except (ValueError, users.PoolBusy) as exc:  # the pool cannot run this grader: nothing graded
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        done = sum(1 for s in students if (student_dir(out, s.key) / "state.json").is_file())
        print(f"\ninterrupted: {done} of {len(students)} submissions graded and kept; "
              "run the same command again to grade the rest", file=sys.stderr)
        return 130
    return class_report.build(out, echo=print)
