"""What a batch engine grades a prepared class from: the queue, the options, the interpreter.

`grade-class --prepare-only` writes them beside the students' folders; every array index reads
them (`pagedlab grade-index`, grading/slurm/grade_array.sbatch), and `class-report` checks what it
merges against them:

    OUT/queue.txt      one student key per line, nothing else: index i is line i+1
    OUT/options.json   the grading options (tasks, hidden checks, the grader's PAGEDLAB_* knobs,
                       the sandbox pool), the queue's length and digest
    OUT/interpreter    the grader's Python, one line (the array's shell script reads it)
    OUT/logs/          the array's own logs, one per job and index (%A_%a.log), appended

No byte of an upload reaches the queue: a key is a file-system-safe name the intake made
(intake.safe_key), checked here against that alphabet when written and again when read, so a
folder named "z\\nalice\\texercises" can neither add a line nor name another student's folder.
Options travel in a file because Slurm's `--export=A=x,B=y` splits values on commas: "--tasks
1,6,11" arrived as "--tasks 1".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, loader, track
from ..sandbox.users import USER_ENV
from ..spec import points
from .class_folder import INTERPRETER, LOGS, OPTIONS, QUEUE

KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")
# The grader's own knobs a grading reads from its environment (time scale, memory, GPU, process
# and network limits, the pool, hidden checks, kernel and C-call time limits): recorded when the
# class is prepared and given to every index, whatever the node's environment says.
GRADING_ENV = ("PAGEDLAB_GRADE_", "PAGEDLAB_HIDDEN_CHECKS", "PAGEDLAB_CUDA_", "PAGEDLAB_C_CALL_TIMEOUT")
SBATCH = "grading/slurm/grade_array.sbatch"
THROTTLE = 50  # array tasks at once (the recipe's %50)


class QueueError(ValueError):
    """The queue or its options are not what the prepare step wrote."""


def grading_env(environ=None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(GRADING_ENV)}


def options(tasks: list[str] | None, hidden, track_choice: str | None = None, environ=None) -> dict:
    """The options a grade of this class runs with, in a canonical form two gradings compare by:
    the task ids (every task when none were named), the hidden-checks choice, the Part A track
    (`--track`; None: each submission's files decide), the knobs, and whether a sandbox pool ran
    the code (which users does not change a score)."""
    env = grading_env(environ)
    pool = env.pop(USER_ENV, "")
    return {"tasks": [row.id for row in points.select(tasks)], "hidden": hidden,
            "track": track.parse(track_choice, "--track"), "env": env, "sandboxed": bool(pool.strip(" ,"))}


def describe(opts: dict) -> str:
    """Options as an instructor typed them: "--tasks 1,12 --no-hidden, sandboxed"."""
    every = [row.id for row in points.select(None)]
    words = [] if opts.get("tasks") == every else ["--tasks " + ",".join(t.removeprefix("task") for t in opts.get("tasks", []))]
    hidden = opts.get("hidden")
    words += ["--no-hidden"] if hidden is False else [] if hidden is True else [f"--hidden {hidden}"]
    words += [f"--track {opts['track']}"] if opts.get("track") else []
    words += [f"{k}={v}" for k, v in opts.get("env", {}).items()]
    words.append("sandboxed" if opts.get("sandboxed") else "not sandboxed")
    return " ".join(words)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY.fullmatch(key) or key in (".", ".."):
        raise QueueError(f"{key!r} is not a student key this grader makes (letters, digits, '.', '_', '-')")
    return key


def write(out: Path, keys: list[str], tasks: list[str] | None, hidden, track_choice: str | None = None) -> None:
    """Write the queue, the options and the interpreter for `keys`, in the array's order."""
    for key in keys:
        check_key(key)
    if len(set(keys)) != len(keys):
        raise QueueError("two students with one key")
    text = "".join(key + "\n" for key in keys)
    record = {"pagedlab": __version__, "students": len(keys), "queue_sha256": _digest(text),
              "options": options(tasks, hidden, track_choice), "pool": os.environ.get(USER_ENV, ""),
              "python": sys.executable}
    (out / LOGS).mkdir(mode=0o700, exist_ok=True)
    for name, content in ((QUEUE, text), (OPTIONS, json.dumps(record, indent=2) + "\n"),
                          (INTERPRETER, sys.executable + "\n")):
        tmp = out / f".{name}.tmp"
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, out / name)  # an index starting meanwhile reads the old or the new, whole


@dataclass(frozen=True)
class Prepared:
    keys: list[str]
    options: dict
    pool: str
    python: str

    def index_of(self, key: str) -> int:
        return self.keys.index(key)


def read(out: Path) -> Prepared:
    """The queue and options as the prepare step wrote them; QueueError when either was changed,
    cut short or is missing (a merge or an index never guesses)."""
    out = Path(out)
    try:
        text = (out / QUEUE).read_text(encoding="utf-8")
        record = json.loads((out / OPTIONS).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise QueueError(f"{exc.filename} is missing: prepare the class first "
                         f"(pagedlab grade-class SUBMISSIONS --out {out} --prepare-only)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise QueueError(f"{out}: the queue or its options cannot be read ({exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("options"), dict):
        raise QueueError(f"{out / OPTIONS}: not the options file grade-class writes")
    if _digest(text) != record.get("queue_sha256"):
        raise QueueError(f"{out / QUEUE} is not the queue the prepare step wrote (its digest in {OPTIONS} differs): "
                         "prepare the class again")
    keys = text.splitlines()
    for number, key in enumerate(keys, 1):
        try:
            check_key(key)
        except QueueError as exc:
            raise QueueError(f"{out / QUEUE} line {number}: {exc}") from None
    if len(keys) != record.get("students") or len(set(keys)) != len(keys):
        raise QueueError(f"{out / QUEUE}: {len(keys)} lines for {record.get('students')} students")
    return Prepared(keys, record["options"], str(record.get("pool", "")), str(record.get("python", "")))


def array_spec(indices: list[int]) -> str:
    """0,1,2,5,7,8 -> "0-2,5,7-8" (Slurm's --array list)."""
    parts, run = [], []
    for i in sorted(set(indices)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def sbatch_line(out: Path, indices: list[int]) -> str:
    """The recipe's sbatch command (grading/README.md) for these indices only."""
    out = Path(out).resolve()
    return " ".join(["sbatch", f"--array={array_spec(indices)}%{THROTTLE}",
                     shlex.quote(f"--output={out / LOGS}/%A_%a.log"), "--open-mode=append",
                     shlex.quote(str(loader.ROOT / SBATCH)), shlex.quote(str(out))])
