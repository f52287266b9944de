"""Read a child's record (JSON lines) as untrusted data: whatever cannot be read is the
submission's failure, never the grader's, and nothing in it can speak for the grader."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..drivers import record
from ..untrusted import MAX_STRING, clip

# The child's record of a task may not exceed this (a flood of fake observations is a failure).
MAX_RECORD_BYTES = 64 * 1024 * 1024
# Nor hold more values than this: 64 MB of `[[],[],...]` would be 20 million lists (gigabytes in
# root's memory). Counted on the bytes before parsing (every value but the first follows a comma
# or opens a container); the fullest honest task, hidden checks included, records ~80 thousand.
MAX_RECORD_VALUES = 1_000_000
MAX_DEPTH = 40
ARRAY = "__array__"  # the key of an encoded numeric array (record.encode_array)


def _scan(value, limit: int = MAX_DEPTH) -> tuple[bool, bool]:
    """(nesting within `limit`, some string longer than MAX_STRING): one iterative pass that
    looks into containers and strings only (JSON keys are strings)."""
    long = False
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False, long
        for key, v in (item.items() if type(item) is dict else enumerate(item)):
            kind = type(v)
            if kind is str:
                # an encoded array is never shown or matched: decode_array checks it byte for byte
                long = long or (len(v) > MAX_STRING and key != ARRAY)
            elif kind is dict or kind is list:
                stack.append((v, depth + 1))
            if type(key) is str:
                long = long or len(key) > MAX_STRING
    return True, long


def _values(data: bytes) -> int:
    """An upper bound on the number of JSON values in `data`, without parsing it."""
    return data.count(b",") + data.count(b"[") + data.count(b"{") + data.count(b"\n")


def clip_strings(value, depth: int = 0):
    """A copy of `value` with every string (keys too) clipped to untrusted.MAX_STRING: a label,
    message or value the submission wrote reaches no regex, format or comparison at full length."""
    if type(value) is str:
        return clip(value)
    if depth > MAX_DEPTH:
        return value
    if type(value) is list:
        return [clip_strings(v, depth + 1) for v in value]
    if type(value) is dict:
        return {clip(k): v if k == ARRAY and type(v) is str else clip_strings(v, depth + 1)
                for k, v in value.items()}
    return value


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
    if _values(data) > MAX_RECORD_VALUES:
        run.malformed = (f"the check record held over {MAX_RECORD_VALUES:,} values: something in the "
                         "task wrote into it")
        return run
    for line in data.splitlines():
        try:
            event = json.loads(line.decode("utf-8", errors="replace"))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        except (ValueError, RecursionError) as exc:  # an integer too long, nesting too deep
            run.malformed = f"the check record held a value that cannot be read ({type(exc).__name__})"
            continue
        shallow, long = _scan(event) if isinstance(event, dict) else (False, False)
        if not shallow:
            run.malformed = "the check record held malformed data"
            continue
        kind = event.get("event")
        if kind == "start":
            run.started = True
        elif kind == "begin" and isinstance(event.get("index"), int):
            run.began = event["index"]
        elif kind == "record" and isinstance(event.get("index"), int):
            try:
                run.records[event["index"]] = record.Stream.from_json(
                    clip_strings(event.get("record")) if long else event.get("record"))
            except (ValueError, TypeError, KeyError, RecursionError) as exc:
                run.malformed = f"the record of a check was malformed ({type(exc).__name__}: {exc})"[:500]
        elif kind == "done":
            run.finished = True
    return run
