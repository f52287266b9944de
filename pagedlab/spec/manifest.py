"""The task manifest (`tasks.toml`): one declarative row per graded task.

The check registry, the points table of `pagedlab grade`, results.json and the task tables of
the README, the grading README and notebook 00 all come from these rows, so adding a task is a
row here plus its fences, checks and notebook cell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PATH = Path(__file__).with_name("tasks.toml")
MANIFEST_ENV = "PAGEDLAB_TASKS"  # another manifest (tests add a toy task through a copy)
# Slow machines (a busy 2-core grader) can stretch every limit: PAGEDLAB_GRADE_TIME_SCALE=2.
TIME_SCALE_ENV = "PAGEDLAB_GRADE_TIME_SCALE"
PARTS = {"A": "the HW3 memory manager", "B": "paged KV cache and attention in torch",
         "C": "the CUDA kernel", "D": "prefix caching and the utilization study",
         "E": "serving under memory pressure"}
_FIELDS = {"id", "title", "part", "notebook", "section", "files", "checks", "points", "time_limit",
           "feedback", "partial", "visibility"}


# Address space of each task's process, GiB (the reference needs under 1; torch and the
# kernel compiler included).
MEMORY_GB = 4.0
MEMORY_ENV = "PAGEDLAB_GRADE_MEMORY_GB"


def _positive(env: str, default: float, unit: str) -> float:
    """A positive number from the environment variable `env`, or `default` when it is unset."""
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{env} must be a positive number{unit}, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"{env} must be a positive number{unit}, got {text!r}")
    return value


def memory_limit() -> float:
    """GiB of address space per task process (PAGEDLAB_GRADE_MEMORY_GB overrides MEMORY_GB)."""
    return _positive(MEMORY_ENV, MEMORY_GB, " of GiB")


def time_scale() -> float:
    """The factor every task's time limit is multiplied by (PAGEDLAB_GRADE_TIME_SCALE)."""
    return _positive(TIME_SCALE_ENV, 1.0, "")


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    part: str
    notebook: str
    section: str
    files: tuple[str, ...]
    checks: str
    points: float
    time_limit: float
    feedback: tuple[str, ...] = ()
    partial: bool = False
    visibility: str = "visible"

    @property
    def task(self) -> str:
        return self.id

    def limit(self) -> float:
        """The time limit after PAGEDLAB_GRADE_TIME_SCALE."""
        return self.time_limit * time_scale()

    @property
    def number(self) -> int:
        return int(self.id.removeprefix("task"))

    @property
    def label(self) -> str:
        """"Task 4 · address translation, …" — how the notebooks and the grader name it."""
        return f"Task {self.number} · {self.title}"

    @property
    def notebook_number(self) -> str:
        return self.notebook.split("_", 1)[0]

    def cite(self, section: str | None = None) -> str:
        """Where a student reads the rule: "notebook 04, Copy-on-write, step by step"."""
        return f"notebook {self.notebook_number}, {section or self.section}"

    def is_feedback(self, check_name: str) -> bool:
        return any(check_name.startswith(prefix) for prefix in self.feedback)


def _parse(path: Path) -> tuple[Task, ...]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    rows = []
    for raw in data.get("task", []):
        unknown = set(raw) - _FIELDS
        if unknown:
            raise ValueError(f"{path}: task {raw.get('id', '?')} has unknown fields {sorted(unknown)}")
        missing = {"id", "title", "part", "notebook", "section", "files", "checks", "points", "time_limit"} - set(raw)
        if missing:
            raise ValueError(f"{path}: task {raw.get('id', '?')} lacks {sorted(missing)}")
        row = Task(raw["id"], raw["title"], raw["part"], raw["notebook"], raw["section"],
                   tuple(raw["files"]), raw["checks"], float(raw["points"]), float(raw["time_limit"]),
                   tuple(raw.get("feedback", ())), bool(raw.get("partial", False)),
                   raw.get("visibility", "visible"))
        if not row.id.startswith("task") or not row.id.removeprefix("task").isdigit():
            raise ValueError(f"{path}: task id {row.id!r} must look like 'task7'")
        if row.part not in PARTS:
            raise ValueError(f"{path}: {row.id} part {row.part!r} is not one of {sorted(PARTS)}")
        if row.points < 0 or row.time_limit <= 0:
            raise ValueError(f"{path}: {row.id} needs points >= 0 and time_limit > 0")
        if not row.checks.isidentifier():
            raise ValueError(f"{path}: {row.id} checks {row.checks!r} must name a module")
        rows.append(row)
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: a task id appears twice")
    return tuple(sorted(rows, key=lambda r: r.number))


TABLE: tuple[Task, ...] = _parse(Path(os.environ.get(MANIFEST_ENV) or PATH))
BY_ID = {row.id: row for row in TABLE}
TASKS = {row.id: row.label for row in TABLE}
MAX_SCORE = sum(row.points for row in TABLE)
# Every file a student submits: their copies of the exercises the tasks read.
SUBMISSION_FILES = tuple(dict.fromkeys(name for row in TABLE for name in row.files))


def task(task_id: str) -> Task:
    key = task_id.strip().lower()
    key = f"task{key}" if key.isdigit() else key
    if key not in BY_ID:
        raise ValueError(f"unknown task {task_id!r}; known: {', '.join(BY_ID)}")
    return BY_ID[key]


def select(ids: list[str] | None = None) -> list[Task]:
    """Rows for `ids` (like 'task3' or '3'), all rows when None or empty."""
    if not ids:
        return list(TABLE)
    rows = {task(i).id: task(i) for i in ids}
    return sorted(rows.values(), key=lambda r: r.number)
