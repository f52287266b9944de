"""The layout of `grade-class`'s output folder, shared by the batch that fills it (classroom) and
the report that reads it (class_report): OUT/queue.tsv and one OUT/students/KEY per student."""

from __future__ import annotations

from pathlib import Path

STUDENTS = "students"
QUEUE = "queue.tsv"


def student_dir(out: Path, key: str) -> Path:
    return out / STUDENTS / key
