"""The layout of `grade-class`'s output folder, shared by the batch that fills it (classroom) and
the report that reads it (class_report): the queue and its options (class_queue), one
OUT/students/KEY per student, and the batch array's logs."""

from __future__ import annotations

from pathlib import Path

STUDENTS = "students"
QUEUE = "queue.txt"  # keys only, one a line (class_queue)
OPTIONS = "options.json"
INTERPRETER = "interpreter"
LOGS = "logs"


def student_dir(out: Path, key: str) -> Path:
    return out / STUDENTS / key


def is_empty(files: Path) -> bool:
    """A student's files folder (OUT/students/KEY/files) in which the intake found no submission
    file: nothing to grade, its own status (not "graded, 0")."""
    return files.is_dir() and not any(p.is_file() for p in files.iterdir())
