"""pagedlab's own compiled programs for sandboxed children: root's, readable, not writable.

A sandboxed child builds the student's kernel (and C track library) in its grading job's private
cache. Without this folder it would also build the CPU executor's runtime, the kernel runner, the
prelude's precompiled headers and the C track's runner there (about 9 CPU-s per graded submission),
because it cannot read root's own cache; and the runners, the programs that seal themselves before
they load the student's code, would be files the sandbox user can replace (a program of the
user's own planted in the job's cache would run, unsealed, as the runner). Root puts them here
once per machine or image (grading/setup.sh's smoke grade does, on Gradescope), copied from its
cache when they are there, built otherwise; the child finds them through compiler.TRUSTED_ENV
and never writes here.

Spec §9: root never opens a path inside a folder the sandbox user can write. The folder and
every folder above it must be root's and writable by no one else (a sticky folder such as /tmp
excepted: no one else may move root's entry in it); otherwise there is no trusted folder and
the child builds all of it in its private cache, as before.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

# compiler.TRUSTED_ENV, the name the child's compiler reads; spelled out here so that grading
# does not import the CUDA executor (numpy and all) to start a child.
CHILD_ENV = "PAGEDLAB_TRUSTED_BUILDS"
FOLDER_ENV = "PAGEDLAB_GRADE_BUILDS"  # where root keeps them (a machine-wide cache)
FOLDER = Path("/var/cache/pagedlab/builds")
# Builds of other pagedlab versions nobody used for this long are removed when a new one lands.
KEEP_DAYS = 14


def folder() -> Path:
    return Path(os.environ.get(FOLDER_ENV) or FOLDER)


def _nobody_else_writes(path: Path) -> Path | None:
    """`path` resolved, if it and every folder above it are root's (or this process's user's)
    and writable by no one else (a sticky folder such as /tmp may be: no one else can move an
    entry of ours in it)."""
    try:
        real = Path(os.path.realpath(path))
        for level in (real, *real.parents):
            st = os.lstat(level)
            writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if st.st_uid not in (0, os.geteuid()) or (writable and not (st.st_mode & stat.S_ISVTX and level != real)):
                return None
        return real
    except OSError:
        return None


def safe(path: Path) -> bool:
    """Whether others may read `path` (and reach it) but nothing in or above it is theirs to write."""
    real = _nobody_else_writes(path)
    if real is None:
        return False
    reachable = all(os.stat(level).st_mode & stat.S_IXOTH for level in (real, *real.parents))
    return reachable and bool(os.stat(real).st_mode & stat.S_IROTH)


def _kernels(rows) -> bool:
    return rows is None or any(name.endswith(".cu") for row in rows for name in row.files)


def _c_track(rows) -> bool:
    from ..engine.ctrack import ALTERNATE_FILES  # memory_manager.py: a C-only submission's runner

    return rows is None or any(name in ALTERNATE_FILES for row in rows for name in row.files)


def needed(rows) -> bool:
    """Whether any of these tasks runs one of pagedlab's programs: a kernel's, or the C track's
    runner (a C-only submission's Tasks 1-5)."""
    return _kernels(rows) or _c_track(rows)


def prepare(rows=None) -> Path | None:
    """Root's folder of trusted builds, complete for `rows` (every task when None); None when
    this process is not root or the folder cannot be made safe (the child then builds everything
    itself)."""
    if os.geteuid() != 0:
        return None
    top = folder()
    try:
        top.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError:
        return None
    if not safe(top):
        return None
    try:
        made = (_fill(top) if _kernels(rows) else []) + (_fill_c(top) if _c_track(rows) else [])
    except Exception:  # noqa: BLE001 - no compiler, a full disk: each child then says so itself
        return None
    for path in made:
        if not _roots(path):  # planted while the folder was someone else's to write
            return None
        _readable(path)
        os.utime(path)  # in use: kept when other versions' builds are pruned
    _prune(top, keep=set(made))
    return top


def _fill(top: Path) -> list[Path]:
    """The runtime, its runner and both precompiled preludes (kernel and sanitizer flags) in
    `top`: copied from root's cache when it has them, built otherwise."""
    from ..cuda import compiler, runner

    cache = compiler.cache_dir()
    source = cache if _nobody_else_writes(cache) else None
    cxx = compiler.find_compiler()
    rt = compiler.runtime_library(into=top, copy_from=source)
    made = [rt, runner.program(rt, copy_from=source)]
    for sanitize in (False, True):
        pch = compiler.precompiled_prelude(cxx, compiler.kernel_flags(cxx, sanitize), into=top,
                                           copy_from=source)
        if pch != compiler.HERE:  # not GCC: the package's own prelude, nothing built
            made.append(pch)
    return made


def _fill_c(top: Path) -> list[Path]:
    """The C track's runner (pagedlab/include/pl_runner.c), copied from root's cache or built."""
    from ..engine import ctrack

    source = ctrack.cache_dir()
    try:
        return [ctrack.runner_program(into=top, copy_from=source if _nobody_else_writes(source) else None)]
    except ctrack.CCompileError:  # no C compiler: a C-only submission's child says so itself
        return []


def _roots(path: Path) -> bool:
    """`path` (and what a folder holds) is root's own file or folder, no link."""
    items = [path, *path.iterdir()] if path.is_dir() and not path.is_symlink() else [path]
    return all(os.lstat(p).st_uid == 0 and not stat.S_ISLNK(os.lstat(p).st_mode) for p in items)


def _readable(path: Path) -> None:
    """Whatever root's umask was: the sandbox user reads (and runs) what is here."""
    if path.is_dir():
        path.chmod(0o755)
        for item in path.iterdir():
            item.chmod(0o644)
    else:
        path.chmod(0o755)


def _prune(top: Path, keep: set[Path]) -> None:
    old = time.time() - KEEP_DAYS * 86400
    for entry in top.iterdir():
        if entry in keep or entry.lstat().st_mtime > old:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


if __name__ == "__main__":  # by hand, or in an image build: python -m pagedlab.sandbox.trusted_builds
    print(prepare() or f"no trusted builds: not root, or {folder()} is not safe for them")
