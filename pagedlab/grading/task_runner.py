"""Child process of `pagedlab grade`: run one task's checks and stream the outcome.

    python -m pagedlab.grading.task_runner --task task3 --impl PATH --out events.jsonl

Each event is one JSON line, flushed at once, so the parent knows how far the task got even when
the student's code kills this process: a check that never reports back is the one that
segfaulted or hung. faulthandler prints the Python stack on a fatal signal, and shortly before
the time limit (`--dump-after`), so the student sees where their code was.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import importlib.util
import json
import os
import sys
import time

# Test and instructor hook: a Python file imported before the checks run (it may register
# extra checks with `pagedlab.checks.check`).
PLUGIN_ENV = "PAGEDLAB_GRADING_PLUGIN"


class _Events:
    def __init__(self, path: str):
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run

    def emit(self, **event) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()


def _load_plugin(path: str) -> None:
    spec = importlib.util.spec_from_file_location("pagedlab_grading_plugin", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


def _load_checks(task: str, events: _Events):
    """The task's checks, or None after reporting why there are none (a grader problem)."""
    from .. import checks

    module = checks.CHECK_MODULES[task]
    qualified = f"{checks.__name__}.{module}"
    if module not in checks._loaded and importlib.util.find_spec(qualified) is None:
        events.emit(event="grader_error", message=f"no graded checks for {task} yet: module {qualified} "
                    f"(pagedlab/checks/{module}.py) is not installed")
        return None
    try:
        found = checks.checks_of(task)
    except Exception as exc:  # noqa: BLE001 - a broken check module is reported, not raised
        events.emit(event="grader_error", message=f"importing {qualified} failed: {type(exc).__name__}: {exc}")
        return None
    if not found:
        events.emit(event="grader_error", message=f"{qualified} registers no checks for {task}")
        return None
    if task == "task10":  # plus the same kernel on a real GPU, when there is one
        try:
            from . import gpu_checks

            if gpu_checks.wanted():
                gpu_checks.register()
                found = checks.checks_of(task)
        except Exception as exc:  # noqa: BLE001 - a broken GPU stack is the grader's problem
            events.emit(event="grader_error", message=f"setting up the GPU check failed: {type(exc).__name__}: {exc}")
            return None
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedlab.grading.task_runner")
    parser.add_argument("--task", required=True)
    parser.add_argument("--impl", required=True)
    parser.add_argument("--out", required=True, help="JSON-lines event file")
    parser.add_argument("--dump-after", type=float, default=0.0,
                        help="print every thread's stack and exit after this many seconds")
    args = parser.parse_args(argv)

    faulthandler.enable(all_threads=True)
    if args.dump_after > 0:
        faulthandler.dump_traceback_later(args.dump_after, exit=True)
    os.environ["PAGEDLAB_IMPL"] = args.impl
    events = _Events(args.out)

    plugin = os.environ.get(PLUGIN_ENV)
    if plugin:
        try:
            _load_plugin(plugin)
        except Exception as exc:  # noqa: BLE001 - reported as the grader's problem
            events.emit(event="grader_error", message=f"grading plugin {plugin} failed: {type(exc).__name__}: {exc}")
            return 3
    from .. import checks

    found = _load_checks(args.task, events)
    if found is None:
        return 3
    events.emit(event="start", checks=[c.name for c in found])
    for index, c in enumerate(found):
        events.emit(event="begin", index=index, name=c.name)
        began = time.perf_counter()
        result = checks.run_one(c, args.impl)
        events.emit(event="result", index=index, name=c.name, passed=result.passed, message=result.message,
                    seconds=round(time.perf_counter() - began, 3))
    events.emit(event="done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
