"""Read a child's record (JSON lines) as untrusted data: whatever cannot be read is the
submission's failure, never the grader's, and nothing in it can speak for the grader."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..checks import framework

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
class ChildRun:
    """What one child process reported: records by index, where it was, how it ended."""

    records: dict = field(default_factory=dict)
    began: int = -1
    started: bool = False
    finished: bool = False
    malformed: str = ""


def parse(data: bytes, size: int) -> ChildRun:
    """The child's record from the bytes root read back (`size`: how large the file really was).
    A `grader_error` line is ignored: after the child started, anything in it may be the
    submission's writing."""
    run = ChildRun()
    if size > MAX_RECORD_BYTES:
        run.malformed = (f"the check record grew to {size / 2**20:.0f} MB (limit "
                         f"{MAX_RECORD_BYTES // 2**20} MB): something in the task wrote into it")
        return run
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        except (ValueError, RecursionError) as exc:  # an integer too long, nesting too deep
            run.malformed = f"the check record held a value that cannot be read ({type(exc).__name__})"
            continue
        if not isinstance(event, dict) or not _depth_ok(event):
            run.malformed = "the check record held malformed data"
            continue
        kind = event.get("event")
        if kind == "start":
            run.started = True
        elif kind == "begin" and isinstance(event.get("index"), int):
            run.began = event["index"]
        elif kind == "record" and isinstance(event.get("index"), int):
            try:
                run.records[event["index"]] = framework.Stream.from_json(event.get("record"))
            except (ValueError, TypeError, KeyError, RecursionError) as exc:
                run.malformed = f"the record of a check was malformed ({type(exc).__name__}: {exc})"[:500]
        elif kind == "done":
            run.finished = True
    return run
