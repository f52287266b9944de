"""Where an implementation of the course files lives: `exercises/`, `solutions/` or a folder.

`exercises/` and `solutions/` hold files of the same names, so one switch (`impl`) decides whose
code the notebooks, the checks and the grader run. A folder path works too: that is how a
submission is graded without copying it into the checkout. Loading a module is `loader`'s job.
"""

from __future__ import annotations

import os
from pathlib import Path

# Where the library is installed. Not where exercises/ live: see course.root().
ROOT = Path(__file__).resolve().parent.parent
NAMED_IMPLS = ("exercises", "solutions")
ENV_VAR = "PAGEDLAB_IMPL"


def impl_dir(impl: str | os.PathLike | None = None) -> Path:
    """The folder an implementation lives in: `exercises`, `solutions` or a path."""
    if impl is None:
        impl = os.environ.get(ENV_VAR) or "exercises"
    if not isinstance(impl, (str, os.PathLike)):
        raise TypeError(f"impl must be 'exercises', 'solutions' or a folder path, not {type(impl).__name__}")
    text = os.fspath(impl)
    if text in NAMED_IMPLS:
        from . import course

        return course.root() / text
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(
            f"impl {text!r} is neither 'exercises' nor 'solutions' nor an existing folder"
        )
    return path


def source_path(filename: str, impl: str | os.PathLike | None = None) -> Path:
    """Path of `filename` (e.g. 'paged_attention.cu') in the chosen implementation."""
    folder = impl_dir(impl)
    path = folder / filename
    if not path.is_file():
        raise FileNotFoundError(
            f"{filename} not found in {folder} (impl={impl!r}; searched {folder}). "
            f"Pass impl='exercises', impl='solutions' or the folder that holds your {filename}."
        )
    return path


def kernel_source(filename: str, impl: str | os.PathLike | None = None) -> str:
    """The text of a kernel file such as 'paged_attention.cu', from the chosen implementation."""
    return source_path(filename, impl).read_text()
