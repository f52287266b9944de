"""`pagedlab doctor`: one table of what the course needs and what this machine has.

Each probe returns (status, found, what to do). Probes are independent and cheap, so a broken
piece (say, no C++20 compiler) is reported next to everything that works instead of hiding it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile

from .doctor_row import MISSING, OK, OPTIONAL, Row  # noqa: F401 - the doctor's names for them

INSTALL = "run ./course test once (it installs everything) or: pip install -c constraints.txt -e '.[dev]'"

# Exercises what the CPU kernel executor relies on: C++20 and std::atomic_ref.
_CXX20_PROBE = """
#include <atomic>
int main() { float x = 0; std::atomic_ref<float>(x).fetch_add(1.0f); return x == 1.0f ? 0 : 1; }
"""


def _module(piece: str, module: str, dist: str, required: bool, todo: str = INSTALL) -> Row:
    try:
        importlib.import_module(module)
        version = importlib.metadata.version(dist)
    except Exception as exc:  # noqa: BLE001 - a broken install is as missing as an absent one
        return Row(piece, MISSING if required else OPTIONAL, f"not importable ({type(exc).__name__})", todo)
    return Row(piece, OK, version)


def cxx_compiler() -> str | None:
    """The C++ compiler the CPU executor uses: $CXX, else g++, else clang++."""
    if os.environ.get("CXX"):
        return os.environ["CXX"]
    return shutil.which("g++") or shutil.which("clang++")


def _compiler() -> Row:
    piece = "C++20 compiler (CPU kernel executor)"
    cxx = cxx_compiler()
    todo = "install g++ >= 12 (Debian/Ubuntu: apt-get install g++) or clang; or set CXX to one"
    if not cxx:
        return Row(piece, MISSING, "no $CXX, g++ or clang++ on PATH", todo)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.cpp")
        with open(src, "w") as f:
            f.write(_CXX20_PROBE)
        try:
            proc = subprocess.run([cxx, "-std=c++20", src, "-o", os.path.join(tmp, "probe")],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Row(piece, MISSING, f"{cxx}: {exc}", todo)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["failed"])[0][:80]
            return Row(piece, MISSING, f"cannot build C++20 with {os.path.basename(cxx)}: {first}", todo)
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()
    return Row(piece, OK, f"{cxx}: {version[0] if version else '?'}")


def _nvrtc() -> Row:
    piece = "NVRTC (GPU compile check)"
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        if int(err) != 0:
            raise RuntimeError(str(err))
    except Exception as exc:  # noqa: BLE001
        return Row(piece, OPTIONAL, f"unavailable ({type(exc).__name__})",
                   "pip install 'pagedlab[dev]' (nvidia-cuda-nvrtc + cuda-bindings); no driver needed")
    return Row(piece, OK, f"NVRTC {major}.{minor}")


def _cupy() -> Row:
    piece = "CuPy + GPU (optional)"
    try:
        import cupy
    except Exception:  # noqa: BLE001
        return Row(piece, OPTIONAL, "CuPy not installed: kernels run on the CPU executor",
                   "on a GPU machine: pip install 'pagedlab[gpu]' (CUDA 12) or 'pagedlab[gpu-cuda13]'")
    try:
        usable = bool(cupy.is_available())
    except Exception:  # noqa: BLE001
        usable = False
    if not usable:
        return Row(piece, OPTIONAL, f"CuPy {cupy.__version__}, but no usable GPU",
                   "kernels run on the CPU executor; check nvidia-smi for a GPU and driver")
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return Row(piece, OK, f"CuPy {cupy.__version__} on {name.decode() if isinstance(name, bytes) else name}")


def _torch() -> Row:
    row = _module("torch", "torch", "torch", True)
    if row.status == OK:
        import torch

        row.found += " (CUDA)" if torch.cuda.is_available() else " (CPU)"
    return row


def _course() -> list[Row]:
    """Which course folder and implementation the notebooks and `grade` will use from here."""
    from . import course, loader

    folder = course.find()
    if folder is None or not folder.is_dir():
        why = f"{course.ENV_VAR} names no folder" if os.environ.get(course.ENV_VAR) else f"none found from {os.getcwd()}"
        return [Row("course folder", MISSING, why,
                    f"cd into your course folder (it holds {course.MARKER}) or set {course.ENV_VAR}")]
    try:
        kind = course.edition(folder)
    except ValueError as exc:
        return [Row("course folder", MISSING, str(folder), str(exc))]
    found = [Row("course folder", OK, f"{folder} ({kind} edition)")]
    impl = os.environ.get(loader.ENV_VAR) or "exercises"
    piece = f"implementation ({loader.ENV_VAR}={impl})" if os.environ.get(loader.ENV_VAR) else "implementation (exercises)"
    try:
        where = loader.impl_dir(impl)
    except FileNotFoundError as exc:
        return found + [Row(piece, MISSING, str(exc), f"unset {loader.ENV_VAR} or point it at your files")]
    if not where.is_dir():
        return found + [Row(piece, MISSING, f"{where} does not exist",
                            f"pull the course again (the nbgitpuller link) or unset {loader.ENV_VAR}")]
    return found + [Row(piece, OK, str(where)), _track_row(where)]


def _track_row(folder) -> Row:
    """Which file Part A (Tasks 1-5) is graded from here, and the rule (pagedlab/track.py)."""
    from . import track

    try:
        chosen = track.decide(folder)
    except track.TrackError as exc:
        return Row("Part A track", MISSING, str(exc), f"write c or python in exercises/{track.MARKER}")
    return Row("Part A track", OK, f"{chosen.file}: {chosen.why}")


TRACK_RULE = ("Part A (Tasks 1–5) is graded from memory_manager.py or llm_memory.c: the one that is not "
              "the untouched stub. Edited both? Python is graded unless exercises/track.txt says c "
              "(or: pagedlab grade --track c). Whitespace and comments are not edits.")


DRIFT = "drift"
RESYNC = "re-run ./course test (it reinstalls from the lock) or: uv pip install --require-hashes -r requirements.lock"


def lock_row() -> Row:
    """Installed versions vs requirements.lock: a drift is reported, not fatal (it may still work)."""
    from . import lockcheck

    piece = "versions vs requirements.lock"
    path = lockcheck.lock_path()
    if path is None:
        return Row(piece, OPTIONAL, "no requirements.lock beside this pagedlab (not a checkout)")
    diffs = lockcheck.drift(lockcheck.read_lock(path.read_text()))
    if not lockcheck.lock_applies():
        return Row(piece, OPTIONAL, f"the lock is for CPython 3.11 on Linux x86_64; {len(diffs)} differ here",
                   "fine: ./course resolved from pyproject.toml + constraints.txt on this machine")
    if not diffs:
        return Row(piece, OK, "every package as locked")
    shown = ", ".join(map(str, diffs[:3])) + (f" and {len(diffs) - 3} more" if len(diffs) > 3 else "")
    return Row(piece, DRIFT, f"{len(diffs)} differ: {shown}", RESYNC)


def rows() -> list[Row]:
    py = sys.version_info
    python = Row("Python >= 3.10", OK if py >= (3, 10) else MISSING, sys.version.split()[0],
                 "" if py >= (3, 10) else "install Python 3.10 or newer")
    return [
        python,
        _module("numpy", "numpy", "numpy", True),
        _torch(),
        _module("matplotlib", "matplotlib", "matplotlib", True),
        _module("JupyterLab", "jupyterlab", "jupyterlab", True),
        _module("ipywidgets", "ipywidgets", "ipywidgets", True),
        _module("nbval (autograder)", "nbval", "nbval", False),
        _compiler(),
        _nvrtc(),
        _cupy(),
        *_c_track(),
        *_course(),
        lock_row(),
    ]


def _c_track() -> list[Row]:
    from .engine.cnative import (
        doctor_rows,  # C compiler, Valgrind, ASan for llm_memory.c (optional)
    )

    return doctor_rows()


def _clip(r: Row) -> str:
    # A folder is shown whole: the student needs to see which copy of the course is in use.
    whole = r.piece.startswith(("course folder", "implementation", "Part A")) or r.status == DRIFT  # every drifted name matters
    return r.found if whole else r.found[:60]


def format_table(table: list[Row]) -> str:
    width = max(len(r.piece) for r in table)
    found_width = min(60, max(len(r.found) for r in table))
    lines = [f"{'piece'.ljust(width)}  {'status':8}  {'found'.ljust(found_width)}  what to do",
             "-" * (width + found_width + 24)]
    for r in table:
        lines.append(f"{r.piece.ljust(width)}  {r.status:8}  {_clip(r).ljust(found_width)}  {r.todo}".rstrip())
    return "\n".join(lines)


def main() -> int:
    table = rows()
    print(format_table(table))
    if any(r.piece == "Part A track" for r in table):
        print(f"\n{TRACK_RULE}")
    missing = [r.piece for r in table if r.status == MISSING]
    if missing:
        print(f"\n{len(missing)} required piece(s) missing: {', '.join(missing)}")
        return 1
    print("\nEverything the course needs is here.")
    return 0
