"""The student API enforced while the code runs, in the checks' child process.

`install(folder)` adds an audit hook (it cannot be removed) and wraps `__import__`. Who asks is
decided by the stack: the innermost frame that belongs to the student's folder or to pagedlab;
if it is the student's, these are refused with a StudentAPIError naming the rule:

- importing a pagedlab module outside the student API, or any module outside it by an import
  statement in the student's file (cached modules raise no audit event, hence the wrapper);
- loading a C library or looking a symbol up through ctypes (`CDLL`, `ctypes.pythonapi`);
- starting a process (`subprocess`, `os.system`, `os.exec*`, `posix_spawn`, `fork`);
- opening a file inside the pagedlab package (its source is the harness and the models).

When a student file is executed (the loader's `exec`), its source is first read by
`guard.static`, so a file that breaks a rule fails to load with the same file:line message the
intake gave.
"""

from __future__ import annotations

import builtins
import os
import sys
from pathlib import Path

from .. import student
from . import StudentAPIError, static

PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
_PROCESS_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "os.startfile",
})
_CTYPES_EVENTS = frozenset({"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle"})
_WATCHED = _PROCESS_EVENTS | _CTYPES_EVENTS | {"import", "open", "exec"}

_student_dir: str | None = None
# A grading plugin (grader-side configuration, never the student's) may turn the guard off to
# test the layers beneath it with submissions that break the API on purpose.
ENFORCED = True


def _owner(filename: str) -> str:
    # pagedlab first: a student folder that holds the package (a checkout) is not the package.
    if filename.startswith(PACKAGE_DIR):
        return "pagedlab"
    if _student_dir is not None and filename.startswith(_student_dir):
        return "student"
    if filename.startswith("<frozen importlib"):
        return "importlib"
    return ""


def _asker(frame, *, through_import: bool) -> str:
    """'student' when the innermost student-or-pagedlab frame is the student's. With
    `through_import`, import machinery in between means the open is an import's own read."""
    while frame is not None:
        owner = _owner(frame.f_code.co_filename)
        if owner == "importlib" and through_import:
            return "importlib"
        if owner in ("student", "pagedlab"):
            return owner
        frame = frame.f_back
    return ""


def _refuse(what: str, rule: str) -> None:
    raise StudentAPIError(f"{what}: {rule}. Student files may import only {student.listing()} (pagedlab.student).")


def _hook(event: str, args: tuple) -> None:
    if event not in _WATCHED:
        return
    if event == "exec":
        code = args[0]
        filename = getattr(code, "co_filename", "")
        if _owner(filename) == "student" and getattr(code, "co_name", "") == "<module>" and os.path.isfile(filename):
            findings = static.check_file(Path(filename))
            if findings:
                raise StudentAPIError("refused by the student API:\n  " + "\n  ".join(findings))
        return
    if event == "open":
        path = args[0]
        if not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
            return
        full = os.path.realpath(os.fsdecode(path))
        if full.startswith(PACKAGE_DIR) and _asker(sys._getframe(1), through_import=True) == "student":
            _refuse(f"your code opened {full}", "student files may not read pagedlab's own files")
        return
    if _asker(sys._getframe(1), through_import=False) != "student":
        return
    if event == "import":
        name = args[0]
        if name.startswith("pagedlab") and not student.allowed(name):
            _refuse(f"your code imported {name}", "the harness and the reference models are not part of the student API")
    elif event in _CTYPES_EVENTS:
        _refuse(f"your code loaded a C library or symbol through ctypes ({event} {args[:2]!r})",
                "student files may not load C libraries (CDLL, ctypes.pythonapi)")
    else:
        _refuse(f"your code started a process ({event})", "student files may not run programs or fork")


def _guarded_import(real):
    def __import__(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - builtins' signature
        if level == 0:
            wanted = [name]
            if name.startswith("pagedlab") and fromlist and not student.allowed(name):
                wanted = [f"{name}.{part}" for part in fromlist]
            refused = [m for m in wanted if not student.allowed(m)]
            # Other modules: the student's own import statements. pagedlab's: whoever asks on the
            # student's behalf too (an unpickler naming the harness, say).
            asker = sys._getframe(1)
            if refused and (_owner(asker.f_code.co_filename) == "student" or (
                    refused[0].startswith("pagedlab") and _asker(asker, through_import=False) == "student")):
                _refuse(f"your code imported {refused[0]}", "only the student API may be imported")
        return real(name, globals, locals, fromlist, level)

    return __import__


def install(folder: os.PathLike | str) -> None:
    """Enforce the student API for files in `folder` from now on (for the rest of the process)."""
    global _student_dir
    if not ENFORCED:
        return
    if _student_dir is not None:
        raise RuntimeError("the student-API guard is already installed in this process")
    _student_dir = str(Path(folder).resolve()) + os.sep
    builtins.__import__ = _guarded_import(builtins.__import__)
    sys.addaudithook(_hook)
