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
"""

from __future__ import annotations

import os
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
