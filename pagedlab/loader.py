"""Find a student's (or the reference) implementation of a course module.

`exercises/` and `solutions/` hold files of the same names, so one switch (`impl`) decides whose
code the notebooks, the checks and the grader run. A folder path works too: that is how a
submission is graded without copying it into the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

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


def load(name: str, impl: str | os.PathLike | None = None) -> ModuleType:
    """Import module `name` (e.g. 'memory_manager') from exercises/, solutions/ or a folder.

    Every call re-executes the file, so a student who edits it and re-runs a cell gets the
    new code without restarting the kernel. The module is registered under a name that says
    whose it is (``pagedlab_impl.solutions.memory_manager``) so tracebacks read well.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"module name must be a Python identifier like 'memory_manager', got {name!r}")
    folder = impl_dir(impl)
    path = folder / f"{name}.py"
    from . import ctrack  # the C track: a folder with llm_memory.c and no memory_manager.py

    if ctrack.has_c_only(folder, name):
        return ctrack.load(folder / ctrack.C_SOURCE)
    if not path.is_file():
        searched = folder if impl is not None or os.environ.get(ENV_VAR) else f"{folder} (default: exercises; set {ENV_VAR} or impl=)"
        raise ModuleNotFoundError(
            f"no module {name!r}: {path.name} not found in {searched}"
        )
    named = os.fspath(impl if impl is not None else os.environ.get(ENV_VAR) or "exercises") in NAMED_IMPLS
    tag = folder.name if named else f"path_{abs(hash(str(folder))):x}"
    qualname = f"pagedlab_impl.{tag}.{name}"
    spec = importlib.util.spec_from_file_location(qualname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(qualname, None)
        raise
    return module
