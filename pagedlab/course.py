"""Find the course folder: the student's own copy of exercises/ and notebooks/.

On a laptop the library and the course are one editable checkout, but on JupyterHub, Binder or
Colab the library is installed once (site-packages, read-only) and each student's materials
arrive in their home folder. So `exercises/`, `solutions/` and `notebooks/` are looked up from
where the student works, never from where pagedlab is installed:

1. `PAGEDLAB_COURSE`, when set, names the folder outright;
2. else the nearest folder, from the working directory upwards, holding the marker file
   `.pagedlab-course` (TOML: ``edition = "instructor"`` or ``"student"``), or failing a marker
   one holding both `exercises/` and `notebooks/`;
3. else the checkout pagedlab itself runs from, if that is a course folder (an editable
   instructor install keeps working from any directory).

The grader is another matter: what it runs as the reference must be its own. `trusted_root` never
walks up from a working directory (a grade-class output folder under /tmp sits below folders a
submission can write), and under root `require_root_only` refuses a reference folder that
someone other than root could change.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MARKER = ".pagedlab-course"
ENV_VAR = "PAGEDLAB_COURSE"
EDITIONS = ("instructor", "student")
# The folder pagedlab's own package sits in: a course folder only for an editable checkout.
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent


class NoCourseFolder(FileNotFoundError):
    """No course folder could be found; the message says where it looked and what to do."""


def is_course(folder: Path) -> bool:
    """A folder with the marker, or with both exercises/ and notebooks/ (an unmarked copy)."""
    return (folder / MARKER).is_file() or ((folder / "exercises").is_dir() and (folder / "notebooks").is_dir())


def _walk_up(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / MARKER).is_file():
            return folder
    for folder in (start, *start.parents):
        if is_course(folder):
            return folder
    return None


def find(start: str | os.PathLike | None = None) -> Path | None:
    """The course folder for `start` (default: the working directory), or None."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return Path(configured).expanduser().resolve()
    try:
        here = Path(start if start is not None else os.getcwd()).resolve()
    except FileNotFoundError:  # the working directory was deleted under us
        here = None
    found = _walk_up(here) if here is not None else None
    if found is None and is_course(_PACKAGE_PARENT):
        found = _PACKAGE_PARENT
    return found


def root(start: str | os.PathLike | None = None) -> Path:
    """The course folder, or NoCourseFolder saying how to point pagedlab at one."""
    found = find(start)
    configured = os.environ.get(ENV_VAR)
    if found is not None and (not configured or found.is_dir()):
        return found
    if configured:
        raise NoCourseFolder(f"{ENV_VAR}={configured} is not a folder")
    where = start if start is not None else os.getcwd()
    raise NoCourseFolder(
        f"no course folder found from {where}: no {MARKER} file and no folder holding both "
        f"exercises/ and notebooks/ there or above. Open the notebooks from your course folder, "
        f"or set {ENV_VAR} to it."
    )


def edition(folder: Path) -> str:
    """'instructor' or 'student' as the marker says; an unmarked folder counts as a student's."""
    path = folder / MARKER
    if not path.is_file():
        return "student"
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        value = tomllib.loads(path.read_text()).get("edition", "student")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid TOML ({exc}); write e.g. edition = \"student\"") from None
    if value not in EDITIONS:
        raise ValueError(f"{path}: edition = {value!r}; allowed: {', '.join(EDITIONS)}")
    return value


class UntrustedFolder(PermissionError):
    """A folder the grader would run as the reference that someone other than root can change."""


def trusted_root() -> Path | None:
    """The course folder the grader takes its reference from: `PAGEDLAB_COURSE` when set, else
    the checkout pagedlab itself runs from. Never a folder found from the working directory."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return Path(configured).expanduser().resolve()
    return _PACKAGE_PARENT if is_course(_PACKAGE_PARENT) else None


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0))


def require_root_only(folder: Path) -> None:
    """Under root, refuse `folder` unless only root can change it or what it holds: it and its
    files root's and not writable by others, and every folder above it either not writable by
    others or sticky (/tmp) with the next folder down root's (so it cannot be swapped)."""
    if os.geteuid() != 0:
        return
    folder = Path(os.path.realpath(folder))  # judged where links lead: the caller uses this path
    try:
        st = os.lstat(folder)
        if st.st_uid != 0 or _writable_by_others(st):
            raise UntrustedFolder(f"{folder} can be changed by a user other than root "
                                  f"(owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)})")
        with os.scandir(folder) as entries:
            for entry in entries:
                est = entry.stat(follow_symlinks=False)
                if est.st_uid != 0 or _writable_by_others(est):
                    raise UntrustedFolder(f"{entry.path} can be changed by a user other than root "
                                          f"(owner uid {est.st_uid}, mode {stat.filemode(est.st_mode)})")
        below = folder
        for above in folder.parents:
            ast = os.lstat(above)
            if _writable_by_others(ast) and not (ast.st_mode & stat.S_ISVTX and os.lstat(below).st_uid == 0):
                raise UntrustedFolder(f"{folder} lies under {above}, which users other than root can write "
                                      "(and it is not sticky with a root-owned folder below it)")
            below = above
    except UntrustedFolder as exc:
        raise UntrustedFolder(f"{exc}; a grader running as root runs only a reference root alone can "
                              f"change (sudo chown -R root: {folder} && sudo chmod -R go-w {folder})") from None
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UntrustedFolder(f"{folder}: cannot check who may change it ({exc})") from None


def reference_dir(reference: str | os.PathLike | None = None) -> Path:
    """The folder the grader runs as the reference: `reference` (a path, or 'solutions') under
    the grader's own installation, checked by `require_root_only`. FileNotFoundError when this
    edition has no reference solutions, UntrustedFolder when it is not root's alone."""
    text = os.fspath(reference) if reference else "solutions"
    if text in EDITION_FOLDERS:
        base = trusted_root()
        if base is None:
            raise FileNotFoundError(f"no {text}/: pagedlab is not installed from a course folder "
                                    f"and {ENV_VAR} is not set")
        folder = base / text
    else:
        folder = Path(text).expanduser()
    folder = Path(os.path.realpath(folder))
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    require_root_only(folder)
    return folder


EDITION_FOLDERS = ("exercises", "solutions")
