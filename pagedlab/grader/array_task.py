"""`pagedlab grade-index DIR INDEX`: grade the student on line INDEX+1 of DIR's queue, as one task
of a batch array (grading/slurm/grade_array.sbatch runs it with SLURM_ARRAY_TASK_ID).

Everything comes from DIR, as `grade-class --prepare-only` wrote it (class_queue): the key, the
options and the grader's knobs (whatever the node's environment or `sbatch --export` says), and
the student's files (the intake's copy in students/KEY/files, never the upload). The grading is
grade-class's own: the same command, time limit and state.json, under a user of the sandbox pool
that the grading process locks on this node for as long as it runs. The student's grade.log is
appended to, each run headed by its job, index, node and restart count, so a requeued index keeps
what its first run wrote; the index's own lines go to the array's log (DIR/logs/%A_%a.log).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sys
import time
from pathlib import Path

from ..sandbox import users
from ..untrusted import escape_line
from . import class_queue, classroom
from .class_folder import is_empty, student_dir
from .intake import Student

STOPPED = 143  # the exit code of a task stopped by SIGTERM (scancel, a requeue, a node going down)


def _use_recorded_options(prepared: class_queue.Prepared) -> None:
    """This process and the grading it starts see the options of the prepare step, and only them."""
    for name in [k for k in os.environ if k.startswith(class_queue.GRADING_ENV)]:
        del os.environ[name]
    os.environ.update(prepared.options.get("env", {}))
    if prepared.pool:
        os.environ[users.USER_ENV] = prepared.pool


def _student(folder: Path, key: str) -> Student:
    try:
        meta = json.loads((folder / "student.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    return Student(key, folder / "files", str(meta.get("name", "")), str(meta.get("email", "")))


def _where(index: int) -> str:
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID") or "-"
    run = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) + 1
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return f"job {job}_{index} on {node}, run {run}"


def grade_index(out: Path, index: int, echo=print) -> int:
    out = Path(out).resolve()
    try:
        prepared = class_queue.read(out)
    except class_queue.QueueError as exc:
        echo(f"error: {exc}")
        return 2
    count = len(prepared.keys)
    if not 0 <= index < count:
        echo(f"error: index {index} is past the end of the queue: {out / class_queue.QUEUE} lists {count} "
             f"students, indices 0-{count - 1} (sbatch --array=0-{count - 1})")
        return 2
    key = prepared.keys[index]
    _use_recorded_options(prepared)
    opts = prepared.options
    tasks, hidden, track_choice = list(opts["tasks"]), opts["hidden"], opts.get("track")
    if class_queue.options(tasks, hidden, track_choice) != opts:
        echo(f"error: {out / class_queue.OPTIONS} names options this grader cannot grade with; prepare the class again")
        return 2
    folder = student_dir(out, key)
    student = _student(folder, key)
    where = _where(index)
    echo(f"pagedlab grade-index: index {index} of {count} is student {key}; {where}; "
         f"options: {class_queue.describe(opts)}")
    state = classroom.student_state(folder, key, classroom.grader_version(tasks, hidden, track_choice), opts)
    state["index"] = index
    try:
        users.pool()  # this node has every user of the pool, and this is root
    except ValueError as exc:
        (folder / "results.json").unlink(missing_ok=True)
        classroom._write_state(folder, dict(state, status="grader problem", problem=f"on {where}: {exc}"))
        echo(escape_line(f"{key}: GRADER PROBLEM: {exc}"))
        return 1
    if is_empty(folder / "files"):
        (folder / "results.json").unlink(missing_ok=True)
        classroom._write_state(folder, dict(state, status="empty", score=0))
        echo(f"{key}: no file to grade (empty, 0 points)")
        return 0
    if classroom._is_current(folder, state):
        echo(f"{key}: already graded by this grader version with these options and unchanged files; kept")
        return 0
    stopped: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    try:
        header = f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} pagedlab grade-index {index}: {where} ==="
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        job = classroom._start(out, student, state, tasks, hidden, header=header, track_choice=track_choice)
        limit = classroom.grading_timeout(tasks)
        while job.proc.poll() is None and not stopped and time.monotonic() - job.began <= limit:
            time.sleep(0.2)
        if stopped:
            # Cancelled or requeued: stop the grading cleanly and leave no state (the merge lists
            # this student as not graded yet until a later run grades it).
            classroom._stop(job)
            job.log.close()
            echo(f"{key}: stopped by SIGTERM (cancelled, requeued or the node is going down); not graded")
            return STOPPED
        late = job.proc.poll() is None
        if late:
            classroom._stop(job)
        state = classroom._finish(out, job, timed_out=late)
        # The grading's CPU time, its check processes' included (each reaped by the one above it):
        # what a student costs the cluster (grading/README.md's plan).
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        state = classroom._write_state(folder, dict(state, cpu_seconds=round(
            after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)))
    finally:
        signal.signal(signal.SIGTERM, previous)
    if state["status"] == "graded":
        echo(f"{key}: graded, {state['score']:g} points in {state['seconds']:.0f} s, {state['cpu_seconds']:g} CPU-s "
             f"(its log: {folder / 'grade.log'})")
        return 0
    echo(escape_line(f"{key}: GRADER PROBLEM: {state['problem']}"))
    return 1


def main(args) -> int:
    index = args.index if args.index is not None else os.environ.get("SLURM_ARRAY_TASK_ID")
    try:
        index = int(index)
    except (TypeError, ValueError):
        print("error: no index: give INDEX, or run as a job array task (SLURM_ARRAY_TASK_ID)", file=sys.stderr)
        return 2
    return grade_index(Path(args.dir), index, echo=lambda text: print(text, flush=True))
