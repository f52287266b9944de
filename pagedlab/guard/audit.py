"""The student API enforced while the code runs, in the checks' child process.

`install(folder)` adds an audit hook (it cannot be removed) and wraps `__import__`. Who asks is
decided by the stack: the innermost frame that belongs to the student's folder or to pagedlab;
if it is the student's, these are refused with a StudentAPIError naming the rule:

- importing a pagedlab module outside the student API, or any module outside it by an import
  statement in the student's file (cached modules raise no audit event, hence the wrapper);
- loading a C library or looking a symbol up through ctypes (`CDLL`, `ctypes.pythonapi`);
- starting a process (`subprocess`, `os.system`, `os.exec*`, `posix_spawn`, `fork`);
- opening a file inside the pagedlab package (its source is the harness and the models);
- compiling or building code under a pagedlab file name (the stack would take it for pagedlab's);
- walking frames or the heap directly (`sys._getframe`, `gc.get_objects`) or rewriting a
  function's code or defaults.

Who asks is the student too in a thread with no pagedlab frame (a thread whose target is a
library callable). Whoever asks, the child never imports the judge side (`pagedlab.grader.trusted`, the
reference attention, the answer models): nothing it runs needs them. The decisions use what
`install` bound, not module globals a student's code could set.

When a student file is executed (the loader's `exec`), its source is first read by
`guard.static`, so a file that breaks a rule fails to load with the same file:line message the
intake gave.
"""

from __future__ import annotations

import builtins
import importlib
import os
import sys
import threading
from pathlib import Path

from .. import student
from . import StudentAPIError, static

PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
_PROCESS_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "os.startfile",
})
_CTYPES_EVENTS = frozenset({"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle"})
_WATCHED = _PROCESS_EVENTS | _CTYPES_EVENTS | {"import", "open", "exec", "compile", "code.__new__"}
# Reaching frames, the heap or a function's code: refused when the caller is the student's file.
_REACH_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
                           "gc.get_referents", "object.__setattr__"})
# The judge side: never imported in the child, whoever asks (the grading set-up makes it
# root-only too: pagedlab.sandbox.private).
JUDGE_SIDE = ("pagedlab.reference", "pagedlab.grader.trusted", "pagedlab.grader.answers",
              "pagedlab.judge_link")  # a grader's notebook run's link to root's judge
JUDGE_FILES = tuple(str(Path(PACKAGE_DIR) / part) for part in ("reference.py", "grader" + os.sep))

_student_dir: str | None = None
# A grading plugin (grader-side configuration, never the student's) may turn the guard off to
# test the layers beneath it with submissions that break the API on purpose.
ENFORCED = True


def _owner(filename: str, student_dir: str | None = None) -> str:
    # pagedlab first: a student folder that holds the package (a checkout) is not the package.
    if filename.startswith(PACKAGE_DIR):
        return "pagedlab"
    if student_dir is not None and filename.startswith(student_dir):
        return "student"
    if filename.startswith("<frozen importlib"):
        return "importlib"
    return ""


def _asker(frame, student_dir: str | None, *, through_import: bool) -> str:
    """'student' when the innermost student-or-pagedlab frame is the student's, or when a thread
    other than the main one has neither (its target is a library callable the student passed).
    With `through_import`, import machinery in between means the open is an import's own read."""
    while frame is not None:
        owner = _owner(frame.f_code.co_filename, student_dir)
        if owner == "importlib" and through_import:
            return "importlib"
        if owner in ("student", "pagedlab"):
            return owner
        frame = frame.f_back
    return "student" if threading.current_thread() is not threading.main_thread() else ""


class _Probe(Exception):
    pass


def _hook_caller():
    """The frame that raised the audit event being handled (the hook's caller), found without
    sys._getframe: that raises an audit event of its own, which would re-enter the hook."""
    try:
        raise _Probe
    except _Probe as probe:
        return probe.__traceback__.tb_frame.f_back.f_back


def _judge_side(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in JUDGE_SIDE)


def _refuse(what: str, rule: str) -> None:
    raise StudentAPIError(f"{what}: {rule}. Student files may import only {student.listing()} (pagedlab.student).")


def _make_hook(student_dir: str, allowed):
    """The audit hook for files in `student_dir`, with its state bound here (not module globals)."""
    def owner(filename):
        return _owner(filename, student_dir)

    def asker(frame, through_import=False):
        return _asker(frame, student_dir, through_import=through_import)

    def hook(event: str, args: tuple) -> None:
        if event in _REACH_EVENTS:
            if event == "object.__setattr__" and args[1] not in ("__code__", "__defaults__", "__kwdefaults__"):
                return
            if owner(_hook_caller().f_code.co_filename) == "student":  # libraries walk frames too
                _refuse(f"your code used {event}", "student files may not walk frames or the heap, or rewrite code")
            return
        if event not in _WATCHED:
            return
        if event == "exec":
            code = args[0]
            filename = getattr(code, "co_filename", "")
            if owner(filename) == "student" and getattr(code, "co_name", "") == "<module>" and os.path.isfile(filename):
                findings = static.check_file(Path(filename))
                if findings:
                    raise StudentAPIError("refused by the student API:\n  " + "\n  ".join(findings))
            return
        if event in ("compile", "code.__new__"):
            filename = args[1] if len(args) > 1 else ""
            filename = os.fsdecode(filename) if isinstance(filename, (str, bytes)) else ""
            if owner(filename) == "pagedlab" and (event == "code.__new__" or asker(_hook_caller()) == "student"):
                _refuse(f"your code built code under pagedlab's file name {filename}",
                        "student code may not pass itself off as pagedlab's")
            return
        if event == "open":
            path = args[0]
            if not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
                return
            full = os.path.realpath(os.fsdecode(path))
            if full.startswith(JUDGE_FILES):
                _refuse(f"the check process opened {full}", "the judge's side is not read where checks run")
            if full.startswith(PACKAGE_DIR) and asker(_hook_caller(), through_import=True) == "student":
                _refuse(f"your code opened {full}", "student files may not read pagedlab's own files")
            return
        if event == "import" and _judge_side(args[0]):
            _refuse(f"the check process imported {args[0]}", "the judge's side is not imported where checks run")
        if asker(_hook_caller()) != "student":
            return
        if event == "import":
            name = args[0]
            if name.startswith("pagedlab") and not allowed(name):
                _refuse(f"your code imported {name}", "the harness and the reference models are not part of the student API")
        elif event in _CTYPES_EVENTS:
            _refuse(f"your code loaded a C library or symbol through ctypes ({event} {args[:2]!r})",
                    "student files may not load C libraries (CDLL, ctypes.pythonapi)")
        else:
            _refuse(f"your code started a process ({event})", "student files may not run programs or fork")

    return hook


def _guarded_import(real, student_dir: str, allowed):
    def __import__(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - builtins' signature
        if level == 0:
            wanted = [name]
            if name.startswith("pagedlab") and fromlist and not allowed(name):
                wanted = [f"{name}.{part}" for part in fromlist]
            refused = [m for m in wanted if not allowed(m)]
            # Other modules: the student's own import statements. pagedlab's: whoever asks on the
            # student's behalf too (an unpickler naming the harness, say).
            asker = sys._getframe(1)
            if refused and (_owner(asker.f_code.co_filename, student_dir) == "student" or (
                    refused[0].startswith("pagedlab") and _asker(asker, student_dir, through_import=False) == "student")):
                _refuse(f"your code imported {refused[0]}", "only the student API may be imported")
        return real(name, globals, locals, fromlist, level)

    return __import__


def _guarded_import_module(real, student_dir: str, allowed):
    """importlib.import_module raises no audit event for a module already loaded."""
    def import_module(name, package=None):
        if not name.startswith(".") and not allowed(name) and name.startswith("pagedlab") \
                and _asker(sys._getframe(1), student_dir, through_import=False) == "student":
            _refuse(f"your code imported {name}", "only the student API may be imported")
        return real(name, package)

    return import_module


def install(folder: os.PathLike | str) -> None:
    """Enforce the student API for files in `folder` from now on (for the rest of the process)."""
    global _student_dir
    if not ENFORCED:
        return
    if _student_dir is not None:
        raise RuntimeError("the student-API guard is already installed in this process")
    _student_dir = str(Path(folder).resolve()) + os.sep  # shown only: the guard uses its own copy
    allowed = student.allowed
    builtins.__import__ = _guarded_import(builtins.__import__, _student_dir, allowed)
    importlib.import_module = _guarded_import_module(importlib.import_module, _student_dir, allowed)
    sys.addaudithook(_make_hook(_student_dir, allowed))
